"""The machine's CPU budget: ordinary runs share it and say so; experiments take it alone.

Why a lease: each run's network lives in a network namespace of its own (ground/netns.py), so
two runs no longer meet on interface names or Thrift ports, and any number of labs and
allreduces may run at once. What they still share is the CPU: two networks at once halve
each other's, which the figures of both would silently carry. So an ordinary run takes the
lease *shared* and records every run it overlapped with (`shared_with()`; the session writes
it into the run's fidelity record), while the commands whose figures are the product
(`agglab experiment`, `agglab calibrate`, `make bench`) take it *alone*: they refuse in one
line (exit 75) while another run is live, and while they hold it every other run refuses,
naming them (pid, command, run directory), before it creates anything.

The lease is a flock on NET_LEASE (ground/paths.py: under /run/agglab for root, machine-wide
whatever AGGLAB_RUN_ROOT says): shared by ordinary runs, exclusive by a run alone (an older
agglab's network holds it exclusive too, so old and new refuse each other as they should).
Each ordinary run also holds an exclusive flock on a file of its own beside it
(`network-run.<pid>`), which says who it is and to which every later run appends its pid: a
run learns of those that were live when it started by trying their locks, and of those that
started later by reading its own file. A lock ends with its holder however that ends (a crash
or kill -9 releases it; a stale file is removed by the next run that sees it). Within one
process the lease is counted (a lab rebuilding, tests, an experiment's runs), and the
children of a process holding the machine alone (`agglab experiment` starting `agglab
calibrate`) are part of its run (AGGLAB_MACHINE_HOLDER names it).
AGGLAB_NET_WAIT=SECONDS makes a run wait that long for the lease instead of refusing at once
(a bench queued behind a lab).
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
    """Another process holds the machine's lease in a way this run cannot share."""

    exit_code = 75     # EX_TEMPFAIL: try again once the other run has ended


_lock = threading.Lock()
_held = {"fd": None, "count": 0, "alone": False, "own": None, "seen": set(), "path": None}
RUN_FILE = "network-run."          # + pid: an ordinary run's own file beside the lease


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


def _who(run_dir) -> bytes:
    return f"pid={os.getpid()}\ncommand={' '.join(_command())}\nrun={run_dir}\n".encode()


def _inherited() -> bool:
    """This process descends from the one holding the machine alone (its run's part)."""
    holder = os.environ.get("AGGLAB_MACHINE_HOLDER", "")
    if not holder.isdigit():
        return False
    pid = os.getppid()
    while pid > 1:
        if pid == int(holder):
            return True
        try:
            pid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            return False
    return False


def acquire(run_dir: Path | str, path: Path | None = None, wait: float | None = None, alone: bool = False) -> None:
    """Take the machine's lease for this process (counted: every acquire needs a release):
    shared, or with `alone` exclusive; raise NetworkBusy naming a holder that prevents it.
    `wait` (default AGGLAB_NET_WAIT, else 0) is how long to wait for it first."""
    path = Path(path or NET_LEASE)
    if wait is None:
        wait = float(os.environ.get("AGGLAB_NET_WAIT") or 0)
    wait = max(wait, 0.5)      # `agglab clean` peeks with a shared lock for a moment
    with _lock:
        if _held["count"]:
            _held["count"] += 1
            return
        if _inherited():
            _held.update(count=1, fd=None, alone=False, own=None, seen=set(), path=path)
            return
        secure_dir(path.parent)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        deadline = time.monotonic() + wait
        while True:
            try:
                fcntl.flock(fd, (fcntl.LOCK_EX if alone else fcntl.LOCK_SH) | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    os.close(fd)
                    raise _busy(_blocker(path, alone)) from None
                time.sleep(0.2)
        own = None
        if alone:
            os.ftruncate(fd, 0)
            os.write(fd, _who(run_dir))
            os.environ["AGGLAB_MACHINE_HOLDER"] = str(os.getpid())
        else:
            own = _own_file(path, run_dir)
        seen = set() if alone else {pid for pid, _ in _live_runs(path)}
        for pid in seen:                   # each run we share with learns of us from its file
            with open(path.parent / f"{RUN_FILE}{pid}", "a") as f:
                f.write(f"shared={os.getpid()}\n")
        _held.update(fd=fd, count=1, alone=alone, own=own, seen=seen, path=path)


def _own_file(path: Path, run_dir) -> int:
    """This run's file beside the lease, locked (made under a temporary name, then renamed, so
    no one sees it unlocked)."""
    tmp = path.parent / f".{RUN_FILE}{os.getpid()}"
    fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)
    os.write(fd, _who(run_dir))
    os.rename(tmp, path.parent / f"{RUN_FILE}{os.getpid()}")
    return fd


def _live_runs(path: Path) -> list[tuple[int, str]]:
    """(pid, who) of every other ordinary run holding the lease; stale files are removed."""
    out = []
    try:
        entries = sorted(path.parent.glob(f"{RUN_FILE}*"))
    except OSError:
        return out
    for f in entries:
        pid = f.name[len(RUN_FILE):]
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            fd = os.open(f, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            f.unlink(missing_ok=True)            # its run ended without releasing (kill -9)
        except BlockingIOError:
            out.append((int(pid), _read_holder(f)))
        finally:
            os.close(fd)
    return out


def _blocker(path: Path, alone: bool) -> str:
    """Who keeps this run from the lease: the run holding the machine alone, or (for a run
    that wants it alone) the first other run."""
    if alone:
        runs = _live_runs(path)
        if runs:
            more = f" and {len(runs) - 1} other run(s)" if len(runs) > 1 else ""
            return runs[0][1] + more
    return _read_holder(path)


def _busy(holder: str) -> NetworkBusy:
    return NetworkBusy(f"another network is running on this machine: {holder}; wait for it to end "
                       "(or set AGGLAB_NET_WAIT=SECONDS to queue behind it)")


def refuse_if_busy(path: Path | None = None, alone: bool = False) -> None:
    """Raise NetworkBusy at once if this run could not take the lease now (another holds the
    machine alone; with `alone`, any other run is live) and would not wait for it
    (AGGLAB_NET_WAIT unset): a run says so before it prints or builds anything."""
    if float(os.environ.get("AGGLAB_NET_WAIT") or 0) <= 0:
        holder = holder_elsewhere(path, alone=alone)
        if holder:
            raise _busy(holder)


def shared_with() -> list[int]:
    """The pids of the runs this process's run overlapped with so far (empty: it had the CPU
    to itself, or holds no lease)."""
    with _lock:
        pids = set(_held["seen"])
        if _held["own"] is not None:
            path = _held["path"]
            try:
                text = (path.parent / f"{RUN_FILE}{os.getpid()}").read_text()
            except OSError:
                text = ""
            pids |= {int(v) for k, _, v in (line.partition("=") for line in text.splitlines())
                     if k == "shared" and v.isdigit()}
        return sorted(pids)


def release() -> None:
    """Give back one acquire(); the last one unlocks."""
    with _lock:
        if not _held["count"]:
            return
        _held["count"] -= 1
        if _held["count"]:
            return
        fd, own, alone, path = _held["fd"], _held["own"], _held["alone"], _held["path"]
        _held.update(fd=None, own=None, alone=False, seen=set(), path=None)
        if own is not None:
            (path.parent / f"{RUN_FILE}{os.getpid()}").unlink(missing_ok=True)
            os.close(own)
        if fd is None:
            return
        if alone:
            os.environ.pop("AGGLAB_MACHINE_HOLDER", None)
        try:
            if alone:
                os.ftruncate(fd, 0)
        finally:
            os.close(fd)          # closing the only descriptor releases the flock


def holder_elsewhere(path: Path | None = None, alone: bool = False) -> str | None:
    """Who holds the machine alone, if another process does (with `alone`: also any other
    live run), else None."""
    path = Path(path or NET_LEASE)
    if _held["count"] or _inherited() or not path.exists() or path.is_symlink():
        return None
    if alone:
        runs = _live_runs(path)
        if runs:
            return runs[0][1]
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


def wait_while_held_alone(path: Path | None = None, limit: float = 900.0) -> str | None:
    """Wait (at most `limit` s) while another process holds the machine alone; None as soon as
    none does (at once if this process holds the lease or is part of the run holding it, or no
    lease file exists), else who still holds it when `limit` has passed.

    Why not a poll of holder_elsewhere(): the release is the event, and a blocking shared flock
    is woken by exactly that. The flock blocks in a thread of its own, joined with `limit`, so
    no timer or signal is involved (a blocked flock cannot be given a timeout). Once granted
    the shared lock is dropped at once: a look, like `agglab clean`'s peek, not a share; this
    process writes no run file and is recorded by no run. After `limit` the thread stays
    blocked until the holder ends and then lets go as well (it is a daemon)."""
    path = Path(path or NET_LEASE)
    if _held["count"] or _inherited():
        return None
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None                 # no lease (nothing ever ran here) or a planted symlink
    free = threading.Event()

    def look():
        try:
            fcntl.flock(fd, fcntl.LOCK_SH)       # blocks while a run holds it exclusive
            fcntl.flock(fd, fcntl.LOCK_UN)
            free.set()
        finally:
            os.close(fd)

    threading.Thread(target=look, name="netlease-wait", daemon=True).start()
    return None if free.wait(limit) else _read_holder(path)


def _command() -> list[str]:
    """This process's command line, shortened to the part a user typed."""
    argv = list(sys.argv) or ["python"]
    name = Path(argv[0]).name
    if name in ("__main__.py", "-c") or name.startswith("python"):
        return ["python", *argv[1:]][:12]
    return [name, *argv[1:]][:12]
