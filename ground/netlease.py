"""One emulated network per machine at a time: a lease every network holds while it exists.

Why a lease rather than names unique per run: a network's switch ends live in the root
network namespace under the names the topology graph gives them (`s1-eth1`, `a3-eth2`),
and those names are the contract of the whole stack (the controller's ports, the link
monitor, pcaps, the lab's commands, exercises, tests); BMv2's Thrift ports are machine-wide
too. A per-run prefix would have to fit in Linux's 15-character interface names beside node
names of up to 9 characters and would reach every one of those places. Two networks at once
also halve each other's CPU, which the figures of both would silently carry. So the second
run refuses at once, in one line that names the run holding the machine (its pid, command and
run directory), before it creates anything: it never meets a kernel error ("File exists"),
and it can never delete the other network's interfaces.

The lease is an exclusive flock on NET_LEASE (ground/paths.py: under /run/agglab for root,
machine-wide whatever AGGLAB_RUN_ROOT says), so it ends with its holder however that ends
(a crash or kill -9 releases it; no stale lock to clean). The holder writes who it is into
the file. Within one process the lease is counted, so a process may hold several networks
(a lab rebuilding, tests): they are one run's, and it owns every name it creates.
AGGLAB_NET_WAIT=SECONDS makes a later run wait that long for the lease instead of refusing
at once (a bench queued behind a lab).
"""

from __future__ import annotations

import fcntl
import os
import sys
import threading
import time
from pathlib import Path

from agglab.ground.paths import NET_LEASE
from agglab.ground.rundir import Refused, secure_dir


class NetworkBusy(Refused):
    """Another process holds the machine's network lease."""

    exit_code = 75     # EX_TEMPFAIL: try again once the other run has ended


_lock = threading.Lock()
_held = {"fd": None, "count": 0}


def _describe(text: str) -> str:
    fields = dict(line.split("=", 1) for line in text.splitlines() if "=" in line)
    if not fields.get("pid"):
        return "another agglab run"
    return (f"pid {fields['pid']} (`{fields.get('command', '?')}`, run directory {fields.get('run', '?')})")


def _read_holder(path: Path) -> str:
    try:
        return _describe(path.read_text())
    except OSError:
        return "another agglab run"


def acquire(run_dir: Path | str, path: Path | None = None, wait: float | None = None) -> None:
    """Take the machine's network lease for this process (counted: every acquire needs a
    release), or raise NetworkBusy naming the holder. `wait` (default AGGLAB_NET_WAIT, else
    0) is how long to wait for it first."""
    path = Path(path or NET_LEASE)
    if wait is None:
        wait = float(os.environ.get("AGGLAB_NET_WAIT") or 0)
    wait = max(wait, 0.5)      # `agglab clean` peeks with a shared lock for a moment
    with _lock:
        if _held["count"]:
            _held["count"] += 1
            return
        secure_dir(path.parent)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        deadline = time.monotonic() + wait
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    os.close(fd)
                    raise _busy(_read_holder(path)) from None
                time.sleep(0.2)
        os.ftruncate(fd, 0)
        os.write(fd, (f"pid={os.getpid()}\ncommand={' '.join(_command())}\nrun={run_dir}\n").encode())
        _held.update(fd=fd, count=1)


def _busy(holder: str) -> NetworkBusy:
    return NetworkBusy(f"another network is running on this machine: {holder}; wait for it to end "
                       "(or set AGGLAB_NET_WAIT=SECONDS to queue behind it)")


def refuse_if_busy(path: Path | None = None) -> None:
    """Raise NetworkBusy at once if another process holds the lease and this run would not
    wait for it (AGGLAB_NET_WAIT unset): a run says so before it prints or builds anything."""
    if float(os.environ.get("AGGLAB_NET_WAIT") or 0) <= 0:
        holder = holder_elsewhere(path)
        if holder:
            raise _busy(holder)


def release() -> None:
    """Give back one acquire(); the last one unlocks."""
    with _lock:
        if not _held["count"]:
            return
        _held["count"] -= 1
        if _held["count"] == 0:
            fd, _held["fd"] = _held["fd"], None
            try:
                os.ftruncate(fd, 0)
            finally:
                os.close(fd)          # closing the only descriptor releases the flock


def holder_elsewhere(path: Path | None = None) -> str | None:
    """Who holds the lease if another process does (for `agglab clean`), else None."""
    path = Path(path or NET_LEASE)
    if _held["count"] or not path.exists() or path.is_symlink():
        return None
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        return None
    except BlockingIOError:
        return _read_holder(path)
    finally:
        os.close(fd)


def _command() -> list[str]:
    """This process's command line, shortened to the part a user typed."""
    argv = list(sys.argv) or ["python"]
    name = Path(argv[0]).name
    if name in ("__main__.py", "-c") or name.startswith("python"):
        return ["python", *argv[1:]][:12]
    return [name, *argv[1:]][:12]
