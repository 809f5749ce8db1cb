"""A scratch network for the daemon's tests and benchmark: hosts in namespaces, one switch.

Not "the lab" (`agglab lab`, the interactive Mininet network); a ScratchNet is a test fixture.

Why not Mininet: the daemon must be testable on any Linux box with iproute2,
and a test must own every object it creates so teardown can remove exactly
those.  Names are unique per ScratchNet (root-side veths `agc<tag>p<N>`, namespaces
`agglab-t-<pid>-<tag>-<host>`, the pid the making process's: ground/netnames.py), so parallel or crashed runs never collide, and
`close()` removes them even after a failed test.

Sockets inside a namespace are created from a short-lived thread that
setns()es into it: a socket stays in the namespace it was created in, so the
test process can then use it directly, without `ip netns exec` children.
"""

from __future__ import annotations

import ctypes
import os
import re
import secrets
import select
import signal
import socket
import struct
import subprocess
import time
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

from agglab.ground import lifeline, wire
from agglab.ground.addresses import SERVICE_IP, SERVICE_MAC, host_ip, host_mac
from agglab.ground.netnames import SCRATCH
from agglab.softswitch.roles import job_entry
from agglab.ground.paths import IMPORT_ROOT

CLONE_NEWNET = 0x40000000
_libc = ctypes.CDLL(None, use_errno=True)


def sh(*argv: str, check: bool = True, ns: str | None = None) -> subprocess.CompletedProcess:
    """Run a command (inside netns `ns` if given); raise with its stderr if it fails and check."""
    full = (["ip", "netns", "exec", ns] if ns else []) + list(argv)
    res = subprocess.run(full, capture_output=True, text=True, timeout=60)
    if check and res.returncode != 0:
        raise RuntimeError(f"{' '.join(full)} failed ({res.returncode}): {res.stderr.strip()}")
    return res


def in_netns(ns: str, fn):
    """Call fn() with the calling thread inside namespace `ns`; return its result."""
    box: dict = {}

    def run() -> None:
        fd = os.open(f"/run/netns/{ns}", os.O_RDONLY)
        try:
            if _libc.setns(fd, CLONE_NEWNET) != 0:
                err = ctypes.get_errno()
                raise OSError(err, f"setns({ns}): {os.strerror(err)}")
            box["value"] = fn()
        except BaseException as exc:          # re-raised in the caller's thread
            box["error"] = exc
        finally:
            os.close(fd)

    t = threading.Thread(target=run)
    t.start()
    t.join()
    if "error" in box:
        raise box["error"]
    return box["value"]


def icmp_ping(ns: str, dst: str, count: int = 3, timeout: float = 2.0) -> int:
    """ICMP echo from namespace `ns` to `dst`; returns how many of `count` were answered.

    Done in Python (raw ICMP socket) so the tests do not depend on iputils-ping."""
    sock = in_netns(ns, lambda: socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP))
    ident, answered = os.getpid() & 0xFFFF, 0
    with sock:
        for seq in range(1, count + 1):
            body = struct.pack("!d", time.time()) * 4
            msg = struct.pack("!BBHHH", 8, 0, 0, ident, seq) + body
            msg = msg[:2] + struct.pack("!H", wire.inet_checksum(msg)) + msg[4:]
            sock.sendto(msg, (dst, 0))
            deadline = time.monotonic() + timeout
            while (left := deadline - time.monotonic()) > 0:
                if not select.select([sock], [], [], left)[0]:
                    break
                pkt, (src, _) = sock.recvfrom(2048)
                icmp = pkt[(pkt[0] & 0x0F) * 4:]
                if src == dst and icmp[0] == 0 and struct.unpack("!HH", icmp[4:8]) == (ident, seq):
                    answered += 1
                    break
    return answered


def agg_frame(h: "Host", values, **fields) -> bytes:
    """Ethernet/IPv4/UDP/agg_h/values frame from host `h` to the aggregation service."""
    payload = wire.pack_agg(**fields) + struct.pack(f"!{wire.K}i", *values)
    udp = struct.pack("!HHHH", wire.UDP_PORT, wire.UDP_PORT, 8 + len(payload), 0)
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(udp) + len(payload), 0, 0x4000, 64, 17, 0,
                     socket.inet_aton(h.ip), socket.inet_aton(SERVICE_IP))
    ip = ip[:10] + struct.pack("!H", wire.inet_checksum(ip)) + ip[12:]
    eth = bytes.fromhex(SERVICE_MAC.replace(":", "")) + bytes.fromhex(h.mac.replace(":", ""))
    return eth + b"\x08\x00" + ip + udp + payload


def program_aggregation(client, hosts: list["Host"], job: int = 0, tree: int = 0,
                        epoch: int = 0) -> None:
    """One switch aggregates `hosts` (child index = list position), results multicast to all."""
    group = 1 + job
    for child, h in enumerate(hosts):
        client.command(job_entry(job, tree, epoch, h.port, child=child, fan_in=len(hosts), mgrp=group).command())
        client.command(f"table_add agg_reply agg_set_dst {h.port} => "
                       f"{SERVICE_MAC} {SERVICE_IP} {h.mac} {h.ip}")
    client.command(f"mc_mgrp_create {group}")
    out = client.command("mc_node_create 0 " + " ".join(str(h.port) for h in hosts))
    handle = re.search(r"handle (\d+)", out)
    if not handle:
        raise RuntimeError(f"cannot parse the node handle from {out!r}")
    client.command(f"mc_node_associate {group} {handle.group(1)}")


def stop_procs(procs: list[subprocess.Popen], grace: float = 5.0) -> None:
    """SIGTERM every process still running, then wait for each, SIGKILL after `grace` s: the
    helpers a scratch network (or the limit bench's chain) started."""
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    for proc in procs:
        try:
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _env() -> dict:
    """Children import the repository first, keeping any PYTHONPATH the caller set."""
    extra = os.environ.get("PYTHONPATH")
    return dict(os.environ, PYTHONPATH=str(IMPORT_ROOT) + (os.pathsep + extra if extra else ""))


@dataclass
class Host:
    name: str
    ns: str
    ip: str
    mac: str
    port: int          # switch port number it hangs off
    switch_if: str     # root-side veth end (the switch's interface)
    ifname: str = "eth0"


PREFIX = SCRATCH.prefix            # + this process's pid (ground/netnames.py: `agglab clean` reads it)
CREATED_HERE: set[str] = set()     # live namespaces this process made (tests/leftovers.py reads it)


class ScratchNet:
    """Hosts h1..hN in namespaces, each wired to one switch port; tears down what it made."""

    def __init__(self, tag: str | None = None):
        self.tag = tag or secrets.token_hex(3)[:5]
        self.hosts: list[Host] = []
        self.procs: list[subprocess.Popen] = []

    def add_host(self, index: int, ip: str | None = None, mac: str | None = None) -> Host:
        ns = SCRATCH.new(f"{self.tag}-h{index}")
        h = Host(f"h{index}", ns, ip or host_ip(index), mac or host_mac(index), index,
                 f"agc{self.tag}p{index}")
        sh("ip", "netns", "add", ns)
        CREATED_HERE.add(ns)
        self.hosts.append(h)                  # recorded first: close() removes it on any failure
        sh("ip", "link", "add", h.switch_if, "type", "veth", "peer", "name", h.ifname, "netns", ns)
        for cmd in (["sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1"],
                    ["ip", "link", "set", "lo", "up"],
                    ["ip", "link", "set", h.ifname, "address", h.mac],
                    ["ip", "addr", "add", f"{h.ip}/8", "dev", h.ifname],
                    ["ip", "link", "set", h.ifname, "up"],
                    ["ip", "neigh", "replace", SERVICE_IP, "lladdr", SERVICE_MAC, "dev", h.ifname]):
            sh(*cmd, ns=ns)
        # The host's stack must put full checksums on the wire: the switch forwards bytes.
        sh("ethtool", "-K", h.ifname, "rx", "off", "tx", "off", "tso", "off", "gso", "off",
           check=False, ns=ns)
        return h

    def static_arp(self) -> None:
        """Every host knows every other host's MAC (the switch does no ARP in these tests)."""
        for h in self.hosts:
            for o in self.hosts:
                if o is not h:
                    sh("ip", "neigh", "replace", o.ip, "lladdr", o.mac, "dev", h.ifname, ns=h.ns)

    def start_switch(self, workdir: Path, *extra: str, name: str = "s1") -> tuple[subprocess.Popen, dict]:
        """Start `python -m agglab.softswitch` on all host ports; returns (process, paths)."""
        paths = {"control": workdir / f"{name}.sock", "log": workdir / f"{name}.log",
                 "pidfile": workdir / f"{name}.pid", "pcaps": workdir / "pcaps"}
        argv = [sys.executable, "-m", "agglab.softswitch", "--name", name,
                "--control", str(paths["control"]), "--log", str(paths["log"]),
                "--pidfile", str(paths["pidfile"]), *extra]
        for h in self.hosts:
            argv += ["--port", f"{h.port}={h.switch_if}"]
        with open(workdir / f"{name}.out", "ab") as out:
            proc = subprocess.Popen(argv, cwd=IMPORT_ROOT, env=_env(), stdout=out, stderr=subprocess.STDOUT,
                                    preexec_fn=lifeline.preexec())
        self.procs.append(proc)
        return proc, paths

    def spawn(self, argv: list[str], ns: str | None = None, **kw) -> subprocess.Popen:
        """Start a helper process (inside `ns` if given) that close() will stop."""
        full = (["ip", "netns", "exec", ns] if ns else []) + argv
        proc = subprocess.Popen(full, cwd=IMPORT_ROOT, env=_env(), **{"preexec_fn": lifeline.preexec(), **kw})
        self.procs.append(proc)
        return proc

    def close(self) -> None:
        """Stop processes, kill anything left in our namespaces, delete namespaces and veths."""
        stop_procs(self.procs)
        for h in self.hosts:
            pids = sh("ip", "netns", "pids", h.ns, check=False).stdout.split()
            for pid in pids:
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except (ProcessLookupError, ValueError):
                    pass
            sh("ip", "netns", "del", h.ns, check=False)
            CREATED_HERE.discard(h.ns)
            if Path("/sys/class/net", h.switch_if).exists():
                sh("ip", "link", "del", h.switch_if, check=False)
        self.hosts.clear()
        self.procs.clear()

    def __enter__(self) -> "ScratchNet":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
