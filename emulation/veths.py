"""All veth pairs of a network in one `ip -batch`, and Mininet links that only adopt them.

Why: Mininet's `addLink` creates each veth pair with its own `ip link add` and then
configures both ends with a shell round trip each (MAC, up, ethtool): about seven
commands per link, 2.4 s of a k=8 fat-tree's 272 links even on an idle machine, and its
teardown deletes them one `ip link del` per end. Here one `ip -batch` creates every pair
(host ends directly inside the host's namespace) in the run's interface group and brings
the switch ends up; Mininet then gets `PrebuiltLink`s whose interfaces run nothing
(`QuietIntf`), so its bookkeeping (ports, intfList, configLinkStatus) works as before.
Links with a rate are shaped with the tc htb commands Mininet's TCIntf would run
(`htb_lines`), but in batches: one `tc -batch` for every switch end, one per host in its
set-up script; TCIntf ran five shell round trips per end (1.7 s of a k=4 fat-tree).
Teardown deletes the whole group with one request: the kernel then unregisters every
veth in one batch, where a `link delete` per pair waits for the network stack each time
(7.7 s for the 384 pairs of a k=8 fat-tree, 0.1 s as a group).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from mininet.link import Intf, Link

from agglab.ground import links
from agglab.ground.rundir import Refused, delete_link_group, group_of


class QuietIntf(Intf):
    """An interface that already exists and is set up elsewhere: config and delete run nothing."""

    def config(self, **_params) -> dict:
        return {}

    def delete(self) -> None:
        """Forget the interface; `delete_veths` removes the kernel objects of all links at once."""
        self.node.delIntf(self)
        self.link = None


class PrebuiltLink(Link):
    """A Mininet link over a veth pair `create_veths` already made."""

    @classmethod
    def makeIntfPair(cls, *_args, **_kwargs):
        return None


def run_batch(lines: list[str], what: str, tool: str = "ip") -> None:
    """`ip -batch -` (or `tc -batch -`) in the caller's namespace (the run's own, ground/netns.py);
    raises with the tool's own message on failure."""
    if not lines:
        return
    res = subprocess.run([tool, "-batch", "-"], input="\n".join(lines) + "\n",
                         capture_output=True, text=True, timeout=120)
    if res.returncode != 0:
        raise RuntimeError(f"{what} failed: {(res.stderr or res.stdout).strip()[:500]}")


# what `ethtool -K IF rx off tx off tso off gso off gro off` turns off, as pyroute2 names them
OFFLOADS = ("rx-checksumming", "tx-checksumming", "tcp-segmentation-offload", "generic-segmentation-offload",
            "generic-receive-offload")


def create_veths(pairs: list[tuple[str, str, int | None]], group: int, offloads_off: bool = True) -> None:
    """Create veth pairs (root_end, other_end, netns_pid): the other end is created inside
    the namespace of process `netns_pid` (None: it stays in the root namespace); each
    root_end is in interface group `group` (delete_veths); every root-namespace end is
    quieted (quiet_ends, offloads off or not), then brought up (a host's end comes up in the
    host's set-up)."""
    root_names = {a for a, _b, _pid in pairs} | {b for _a, b, pid in pairs if not pid}
    taken = sorted(root_names & {p.name for p in Path("/sys/class/net").iterdir()})
    if taken:      # not ours (the run's namespace is fresh): never create over, never delete them
        raise Refused(f"interface {taken[0]} already exists ({len(taken)} of this network's names are taken "
                           "by something no live agglab run records: `agglab clean --all` removes agglab's leftovers)")
    run_batch([f"link add name {a} group {group} type veth peer name {b} group {group}" + (f" netns {pid}" if pid else "")
               for a, b, pid in pairs], "creating the network's veth pairs")
    root_ends = [a for a, _b, _pid in pairs] + [b for _a, b, pid in pairs if not pid]
    quiet_ends(root_ends, offloads_off)
    run_batch([f"link set dev {name} up" for name in root_ends], "bringing the switches' ends up")


def htb_lines(ifname: str, mbps: float) -> list[str]:
    """`tc -batch` lines that shape `ifname` to `mbps` as Mininet's TCIntf(bw=mbps) does
    (htb, one class, burst 15k; a new veth has no qdisc to delete first), but with the
    cburst of ground/links.py instead of tc's one MTU: the bucket paced hosts send into."""
    return [f"qdisc add dev {ifname} root handle 5:0 htb default 1",
            f"class add dev {ifname} parent 5:0 classid 5:1 htb rate {mbps:f}Mbit burst 15k "
            f"cburst {links.burst_bytes(mbps)}b"]


def shape(rates: dict[str, float]) -> None:
    """Shape root-namespace interfaces (name -> Mb/s) with one `tc -batch`."""
    run_batch([line for name, mbps in rates.items() for line in htb_lines(name, mbps)],
              "shaping the switches' ends", tool="tc")


def quiet_ends(names: list[str], offloads_off: bool = True) -> None:
    """No IPv6 and (with `offloads_off`) no offloads on root-namespace (switch) ends, before
    they come up: a switch port is a wire, so the kernel must send nothing from it (router
    solicitations, DAD) and hand over frames as they came (no GRO). Done here for all ports
    at once (a /proc write and five ethtool ioctls each) because the software switches start
    with --no-prepare: each running `ip` and `ethtool` per port itself was 1,280 processes in
    a k=8 fat-tree (softswitch/io.py turned off the same offloads). BMv2's ports keep their
    offloads, as they always had here: with them off, a k=4 fat-tree of BMv2 switches (8 x
    20,000 int32, unshaped) took 22-27 s with 58,000-73,000 resends instead of 10-16 s with
    26,000-39,000 (measured on 2026-12-02)."""
    from pyroute2.ethtool.ioctl import IoctlEthtool  # lazy: pyroute2, only quiet_ends() needs it

    ethtool = IoctlEthtool()
    try:
        for name in names:
            (Path("/proc/sys/net/ipv6/conf") / name / "disable_ipv6").write_text("1")
            if offloads_off:
                ethtool.change_ifname(name)
                for flag in OFFLOADS:
                    ethtool.set_offload_flag(flag, 0)
    finally:
        ethtool.close()


def delete_veths(group: int, names: list[str]) -> None:
    """Delete interface group `group` (both ends of every pair are in it), then those of
    `names` still in the root namespace and still in that group with one `ip -force -batch`
    (-force: a pair whose other end was deleted first is already gone; that is no error).
    Never an interface outside the group: a name this run recorded may be another's now."""
    delete_link_group(group)
    lines = [f"link delete dev {name}" for name in names if group and group_of(name) == group]
    if lines:
        subprocess.run(["ip", "-force", "-batch", "-"], input="\n".join(lines) + "\n",
                       capture_output=True, text=True, timeout=120)
