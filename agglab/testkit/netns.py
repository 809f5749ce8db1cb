"""A private network namespace with veth pairs, for running BMv2 against real frames.

Why a namespace of our own: the conformance test injects and captures raw
frames; inside a fresh namespace with IPv6 off there is no other traffic
(no router solicitations, no MLD), and nothing leaks onto the host's links.
Both ends of every veth pair live in the namespace: `sw<N>` is switch port N,
`hs<N>` is where the test sends and listens.

`inside(name)` switches only the calling thread into the namespace (setns),
so sockets opened in the block stay bound to it after the block ends.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import subprocess
import uuid

from agglab.ground.netnames import CONF

CLONE_NEWNET = 0x40000000
_libc = ctypes.CDLL(None, use_errno=True)


def _setns(fd: int) -> None:
    if _libc.setns(fd, CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"setns: {os.strerror(err)}")


@contextlib.contextmanager
def inside(name: str):
    """Run the block (this thread only) in network namespace `name`."""
    own = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    try:
        target = os.open(f"/run/netns/{name}", os.O_RDONLY)
        try:
            _setns(target)
            try:
                yield
            finally:
                _setns(own)
        finally:
            os.close(target)
    finally:
        os.close(own)


def run(*cmd: str) -> str:
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}): {proc.stderr.strip()}")
    return proc.stdout


PREFIX = CONF.prefix               # + this process's pid (ground/netnames.py: `agglab clean` reads it)
CREATED_HERE: set[str] = set()     # live namespaces this process made (tests/leftovers.py reads it)


class Namespace:
    """`agglab-conf-<pid>-<random>` with ports 1..n as veth pairs sw<N> <-> hs<N>; the pid is
    this process's, so `agglab clean` removes it once this process is gone (killed mid-test)."""

    def __init__(self, nports: int):
        self.name = CONF.new(uuid.uuid4().hex[:8])
        self.nports = nports
        self.created = False

    def switch_if(self, port: int) -> str:
        return f"sw{port}"

    def host_if(self, port: int) -> str:
        return f"hs{port}"

    def exec_args(self, *cmd: str) -> list[str]:
        return ["ip", "netns", "exec", self.name, *cmd]

    def create(self) -> None:
        run("ip", "netns", "add", self.name)
        self.created = True
        CREATED_HERE.add(self.name)
        ex = self.exec_args
        run(*ex("sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1", "net.ipv6.conf.default.disable_ipv6=1"))
        run(*ex("ip", "link", "set", "lo", "up"))
        for port in range(1, self.nports + 1):
            sw, hs = self.switch_if(port), self.host_if(port)
            run(*ex("ip", "link", "add", sw, "type", "veth", "peer", "name", hs))
            for ifname in (sw, hs):
                # checksum offload would leave checksums to "hardware" that never computes them
                run(*ex("ethtool", "-K", ifname, "rx", "off", "tx", "off"))
                run(*ex("ip", "link", "set", ifname, "up"))

    def delete(self) -> None:
        """Remove the namespace (and with it every veth); safe to call twice."""
        if self.created:
            subprocess.run(["ip", "netns", "del", self.name], capture_output=True, timeout=30)
            self.created = False
            CREATED_HERE.discard(self.name)
