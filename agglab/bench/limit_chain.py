"""The chain the `limit` section moves frames through: sender, forwarder, receiver namespaces.

    snd ns  l<tag>s ==veth+htb== l<tag>a  mid ns  l<tag>b ==veth+htb== l<tag>r  rcv ns

Every veth end is shaped with the emulator's own htb lines (emulation/veths.py `htb_lines`) at
a rate no run here reaches (RATE_MBPS), so every frame passes through htb's enqueue and dequeue
as on an emulated link but htb never holds one back: a frame htb holds back leaves from its
timer, in interrupt context, where no task's CPU clock counts it.

In the middle namespace sits the forwarder under test: a Linux bridge (`bridge()`) or agglab's
software switch on ports 1 = l<tag>a and 2 = l<tag>b (started by the caller).

Why threaded NAPI on the receiving ends (`napi_threads`): the kernel's per-frame work has no
process of its own. A veth normally hands a frame to the peer's backlog and the kernel
processes it in whatever context raised the softirq (the sender's system call, or an
interrupt on an idle CPU), so the bridge's cost would land in the load generator's CPU or in
nobody's. With GRO on, a veth end receives through NAPI, and with `threaded` set its NAPI poll
runs in a kernel thread `napi/<ifname>-<id>` whose CPU clock is exact (this kernel has no IRQ
time accounting; /proc/stat's softirq column is in 10 ms ticks). So the forwarder's ingress
end l<tag>a is threaded: its thread does the receive (and, for the bridge, the forwarding and
the transmit through htb up to the receiver's socket). The sender's end l<tag>s is threaded too:
it carries what comes back to an agent. GRO merges no UDP frame here (no UDP GRO socket, no
UDP GRO forwarding), so frames stay frames.

Cleanup: `close()` (and leaving the `with`, also on Ctrl-C) stops the processes started
through `spawn`, then deletes the three namespaces, which deletes their veths and bridge.
"""

from __future__ import annotations

import os
import secrets
import signal
import socket
import struct
import subprocess
import time
from pathlib import Path

from agglab.ground import lifeline, wire
from agglab.ground.addresses import SERVICE_IP, SERVICE_MAC, host_ip, host_mac
from agglab.ground.netnames import SCRATCH
from agglab.ground.paths import IMPORT_ROOT
from agglab.softswitch import scratchnet

RATE_MBPS = 10_000.0          # the htb rate of every end: far above any rate a run here reaches


def cpu_ns(pid: int) -> int:
    """CPU nanoseconds of process `pid` (all its threads) so far, from its CPU-time clock:
    exact, where /proc/<pid>/stat counts ticks; a process that is gone reads 0."""
    try:
        return time.clock_gettime_ns(((~pid) << 3) | 2)        # CPUCLOCK_SCHED of the process
    except OSError:
        return 0


def threads_named(prefix: str) -> list[int]:
    """Kernel threads whose name starts with `prefix` (a NAPI thread: napi/<ifname>-<id>)."""
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if (entry / "comm").read_text().startswith(prefix):
                    out.append(int(entry.name))
            except OSError:
                pass
    return out


def agg_frame_to(src_ip: str, src_mac: str, dst_ip: str, dst_mac: str, values, **fields) -> bytes:
    """A dense aggregation frame (the emulator's size: wire.FRAME_BYTES) between two addresses."""
    frame = scratchnet.agg_frame(scratchnet.Host("h", "", src_ip, src_mac, 0, ""), values, **fields)
    ip = bytearray(frame[14:34])
    ip[16:20] = socket.inet_aton(dst_ip)
    ip[10:12] = b"\0\0"
    ip[10:12] = struct.pack("!H", wire.inet_checksum(bytes(ip)))
    return bytes.fromhex(dst_mac.replace(":", "")) + frame[6:14] + bytes(ip) + frame[34:]


class Chain:
    """Three namespaces joined by two shaped veth pairs; the forwarder's ports are 1 and 2."""

    def __init__(self) -> None:
        self.tag = secrets.token_hex(3)[:5]
        self.ns = {role: SCRATCH.new(f"{self.tag}-{role}") for role in ("snd", "mid", "rcv")}
        self.ifs = {end: f"l{self.tag}{end}" for end in "sabr"}
        self.snd_ip, self.snd_mac = host_ip(1), host_mac(1)
        self.rcv_ip, self.rcv_mac = host_ip(2), host_mac(2)
        self.procs: list[subprocess.Popen] = []
        self.made: list[str] = []

    def __enter__(self) -> "Chain":
        try:
            self._build()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def sh(self, role: str | None, *argv: str, check: bool = True) -> str:
        return scratchnet.sh(*argv, ns=self.ns[role] if role else None, check=check).stdout

    def _build(self) -> None:
        from agglab.emulation.veths import htb_lines  # lazy: loads Mininet; the emulator's links' shaping, line for line

        for role, ns in self.ns.items():
            scratchnet.sh("ip", "netns", "add", ns)
            scratchnet.CREATED_HERE.add(ns)
            self.made.append(ns)
            for cmd in (["sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1"],
                        ["sysctl", "-qw", "net.ipv6.conf.default.disable_ipv6=1"],
                        ["ip", "link", "set", "lo", "up"]):
                self.sh(role, *cmd)
        s, a, b, r = (self.ifs[e] for e in "sabr")
        self.sh("snd", "ip", "link", "add", s, "type", "veth", "peer", "name", a, "netns", self.ns["mid"])
        self.sh("mid", "ip", "link", "add", b, "type", "veth", "peer", "name", r, "netns", self.ns["rcv"])
        for role, ifname, ip, mac in (("snd", s, self.snd_ip, self.snd_mac), ("rcv", r, self.rcv_ip, self.rcv_mac)):
            self.sh(role, "ip", "link", "set", ifname, "address", mac)
            self.sh(role, "ip", "addr", "add", f"{ip}/8", "dev", ifname)
            self.sh(role, "ip", "neigh", "replace", SERVICE_IP, "lladdr", SERVICE_MAC, "dev", ifname)
        self.sh("snd", "ip", "neigh", "replace", self.rcv_ip, "lladdr", self.rcv_mac, "dev", s)
        for role, ifname in (("snd", s), ("mid", a), ("mid", b), ("rcv", r)):
            # full checksums on the wire (a forwarder passes bytes), no GRO unless threaded below
            self.sh(role, "ethtool", "-K", ifname, "rx", "off", "tx", "off", "tso", "off", "gso", "off",
                    "gro", "off", check=False)
            for line in htb_lines(ifname, RATE_MBPS):
                self.sh(role, "tc", *line.split())
            self.sh(role, "ip", "link", "set", ifname, "up")

    def napi_threads(self) -> dict[str, list[int]]:
        """GRO and threaded NAPI on the forwarder's ingress (a) and the sender's end (s); returns
        each end's NAPI thread ids. Call after the forwarder is up (the software switch turns
        GRO off on its ports when it opens them)."""
        out = {}
        for role, end in (("mid", "a"), ("snd", "s")):
            ifname = self.ifs[end]
            self.sh(role, "ethtool", "-K", ifname, "gro", "on")
            self.sh(role, "sh", "-c", f"echo 1 > /sys/class/net/{ifname}/threaded")
            deadline = time.monotonic() + 5
            while not (pids := threads_named(f"napi/{ifname}-")) and time.monotonic() < deadline:
                time.sleep(0.05)
            if not pids:
                raise RuntimeError(f"no threaded NAPI thread for {ifname} (this kernel's veth must take "
                                   f"`ethtool -K {ifname} gro on` and /sys/class/net/{ifname}/threaded)")
            out[end] = pids
        return out

    def bridge(self) -> None:
        """A Linux bridge in the middle namespace between ports a and b; the receiver's MAC is
        a static entry on b, so frames are forwarded (not flooded), and bridged frames go past
        no iptables (where br_netfilter is loaded, its per-namespace switches are turned off)."""
        a, b = self.ifs["a"], self.ifs["b"]
        self.sh("mid", "ip", "link", "add", "br0", "type", "bridge", "stp_state", "0", "mcast_snooping", "0")
        for port in (a, b):
            self.sh("mid", "ip", "link", "set", port, "master", "br0")
        for table in ("iptables", "ip6tables", "arptables"):
            self.sh("mid", "sysctl", "-qw", f"net.bridge.bridge-nf-call-{table}=0", check=False)
        self.sh("mid", "sysctl", "-qw", "net.ipv6.conf.br0.disable_ipv6=1", check=False)
        self.sh("mid", "ip", "link", "set", "br0", "up")
        self.sh("mid", "bridge", "fdb", "replace", self.rcv_mac, "dev", b, "master", "static")

    def socket_in(self, role: str, family: int, kind: int, proto: int = 0) -> socket.socket:
        """A socket created inside namespace `role` (it stays there; this process uses it)."""
        return scratchnet.in_netns(self.ns[role], lambda: socket.socket(family, kind, proto))

    def spawn(self, role: str, argv: list[str], **kw) -> subprocess.Popen:
        """A process inside namespace `role` that close() stops."""
        proc = subprocess.Popen(["ip", "netns", "exec", self.ns[role], *argv], cwd=IMPORT_ROOT, env=scratchnet._env(),
                                preexec_fn=lifeline.preexec(), **kw)
        self.procs.append(proc)
        return proc

    def close(self) -> None:
        scratchnet.stop_procs(self.procs)
        self.procs.clear()
        for ns in self.made:
            for pid in scratchnet.sh("ip", "netns", "pids", ns, check=False).stdout.split():
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except (ProcessLookupError, ValueError):
                    pass
            scratchnet.sh("ip", "netns", "del", ns, check=False)
            scratchnet.CREATED_HERE.discard(ns)
        self.made.clear()
