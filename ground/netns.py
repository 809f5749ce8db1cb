"""Each run's network in a network namespace of its own, found again by name after a crash.

Why: a network's switch ends carry the names the topology graph gives them (`s1-eth1`), the
whole stack speaks those names, and BMv2's Thrift ports and the control channels are numbers
on a loopback. In the root namespace all of those are machine-wide, so one network per
machine was the rule. In a namespace of its own, every run has its own interface names, its
own loopback and its own ports: any number of runs coexist with the same node names, and the
root namespace holds nothing of them.

How, as `ip netns exec` does it: `ip netns add agglab-run-<owner pid>-<tag>` makes the
namespace and bind-mounts it at /run/netns/NAME, so `agglab clean` finds it by name (the
owner's pid is in the name) and `ip netns pids` lists what still runs in it. The thread that
builds the network then enters it (setns) and a mount namespace of its own in which /sys is
remounted, so that /sys/class/net shows the run's interfaces to it and to everything it
starts (switches, launchers, Mininet's shells). Threads it starts afterwards inherit both;
threads that existed before stay where they were. `leave()` puts the thread back (the mount
namespace only if no thread shares it any more; else /sys is remounted to show the root
namespace again). Namespaces are created and deleted from the mount namespace the process
started in (`nsenter`), so the bind mount is visible to every other process.
"""

from __future__ import annotations

import ctypes
import os
import socket
import subprocess
import threading
import uuid

from agglab.ground.interrupts import deferred
from agglab.ground.netnames import NETNS_DIR, RUN

PREFIX = RUN.prefix               # never `agglab-c<i>` (the practice cluster's servers)

CLONE_NEWNS = 0x00020000
CLONE_NEWNET = 0x40000000
MS_REC = 0x4000
MS_SLAVE = 1 << 19
MNT_DETACH = 2

_libc = ctypes.CDLL(None, use_errno=True)
_origin: dict[str, int] = {}          # "net"/"mnt" -> a descriptor of the namespace the process began in
_origin_lock = threading.Lock()


def _check(ret: int, what: str) -> None:
    if ret != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _setns(fd: int, kind: int, what: str) -> None:
    _check(_libc.setns(fd, kind), f"setns to {what}")


def _remount_sys() -> None:
    """A fresh sysfs on /sys in this thread's own mount namespace: it shows the interfaces of
    the network namespace this thread is in now."""
    _libc.umount2(b"/sys", MNT_DETACH)
    _check(_libc.mount(b"sysfs", b"/sys", b"sysfs", 0, None), "mounting /sys")


def _remember_origin() -> None:
    """Descriptors of the namespaces this process began in (taken before any thread moves)."""
    with _origin_lock:
        if not _origin:
            for kind in ("net", "mnt"):
                _origin[kind] = os.open(f"/proc/{os.getpid()}/ns/{kind}", os.O_RDONLY | os.O_CLOEXEC)


def new_name(owner: int | None = None) -> str:
    """A fresh namespace name for a run owned by process `owner` (default: this one)."""
    return RUN.new(uuid.uuid4().hex[:8], owner)


def owner_of(name: str) -> int | None:
    """The owner pid in a run namespace's name (None: not a name of ours)."""
    return RUN.owner_of(name)


def _ip(*args: str, check: bool = False) -> subprocess.CompletedProcess:
    """`ip ARGS` from the namespaces the process began in (where /run/netns is everyone's)."""
    argv = ["ip", *args]
    fds = ()
    if _origin:
        argv = ["nsenter", f"--mount=/proc/self/fd/{_origin['mnt']}", f"--net=/proc/self/fd/{_origin['net']}", *argv]
        fds = (_origin["mnt"], _origin["net"])
    res = subprocess.run(argv, capture_output=True, text=True, timeout=60, pass_fds=fds)
    if check and res.returncode != 0:
        raise RuntimeError(f"`ip {' '.join(args)}` failed: {(res.stderr or res.stdout).strip()[:300]}")
    return res


def names() -> list[str]:
    """Every run namespace on the machine (ours by name), sorted."""
    try:
        return sorted(p.name for p in NETNS_DIR.iterdir() if owner_of(p.name) is not None)
    except OSError:
        return []


def pids_in(name: str) -> list[int]:
    """The processes whose network namespace is `name` (`ip netns pids`)."""
    res = _ip("netns", "pids", name)
    return [int(w) for w in res.stdout.split() if w.isdigit()]


def delete(name: str) -> bool:
    """Delete namespace `name` (its interfaces go with it once no process holds it); True if
    it existed."""
    if not (NETNS_DIR / name).exists():
        return False
    res = _ip("netns", "delete", name)
    if (NETNS_DIR / name).exists():      # said, not silently left for `agglab clean`
        raise RuntimeError(f"namespace {name} could not be deleted: {(res.stderr or res.stdout).strip()[:300]}")
    return True


class RunNamespace:
    """A run's network namespace, which the thread that calls enter() lives in until leave()."""

    def __init__(self, name: str | None = None):
        self.name = name or new_name()
        self._thread: int | None = None
        self._back: dict[str, int] = {}

    def create(self) -> "RunNamespace":
        """Make the namespace; a stop signal meanwhile is raised once `ip` has finished
        (ground/interrupts.py's deferred() says why), so the caller's delete() finds it."""
        _remember_origin()
        with deferred():
            _ip("netns", "add", self.name, check=True)
        _ip("-n", self.name, "link", "set", "lo", "up", check=True)   # Thrift and control channels
        return self

    def enter(self) -> "RunNamespace":
        """Move the calling thread into the namespace, with /sys showing it."""
        for kind in ("net", "mnt"):
            self._back[kind] = os.open(f"/proc/thread-self/ns/{kind}", os.O_RDONLY | os.O_CLOEXEC)
        self._back["cwd"] = os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        fd = os.open(NETNS_DIR / self.name, os.O_RDONLY | os.O_CLOEXEC)
        try:
            _setns(fd, CLONE_NEWNET, self.name)
        finally:
            os.close(fd)
        self._thread = threading.get_ident()
        _check(_libc.unshare(CLONE_NEWNS), "a mount namespace of the run's own")
        _check(_libc.mount(None, b"/", None, MS_SLAVE | MS_REC, None), "making / a slave mount")
        _remount_sys()
        return self

    def leave(self) -> None:
        """Put the calling thread back where enter() found it (only the thread that entered)."""
        if self._thread != threading.get_ident() or not self._back:
            return
        try:
            _setns(self._back["net"], CLONE_NEWNET, "the namespace the run began in")
            try:
                _setns(self._back["mnt"], CLONE_NEWNS, "the mount namespace the run began in")
            except OSError:       # a thread started in the run still shares this one: show root's /sys
                _remount_sys()
            os.fchdir(self._back["cwd"])   # setns to a mount namespace moves the thread to its "/":
                                           # a suite's relative results/ path must still resolve
        finally:
            for fd in self._back.values():
                os.close(fd)
            self._back.clear()
            self._thread = None

    def delete(self) -> None:
        delete(self.name)


def root_server_socket(host: str, port: int) -> socket.socket:
    """A listening TCP socket in the namespace the process began in (a live page reachable from
    the machine, whichever namespace the calling thread lives in now)."""
    family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
    if not _origin:
        return socket.create_server((host, port), family=family)
    back = os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
    try:
        _setns(_origin["net"], CLONE_NEWNET, "the machine's namespace")
        try:
            return socket.create_server((host, port), family=family)
        finally:
            _setns(back, CLONE_NEWNET, "the run's namespace")
    finally:
        os.close(back)
