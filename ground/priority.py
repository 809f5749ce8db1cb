"""Run the calling process, and for a while given processes, ahead of the rest (Linux, as root).

Why: a reroute (controller/reroute/run.py) is a few tens of milliseconds of Python on a machine
whose two cores are shared by 20 software switches, the workers and whatever else runs; at
the default priority every millisecond of its own work waits its turn behind them, and so
does the link monitor's wake-up on a netlink event. The reroute's rounds wait for the
slowest switch's answer, so the switch daemons are raised too while it runs (`urgent(pids)`).
Without the privilege (not root) nothing changes.

Two things beyond niceness. Autogroups: with the kernel's autogroup scheduling on
(/proc/sys/kernel/sched_autogroup_enabled, the default of most distributions) every
session is a scheduling group of its own, and a process's niceness only weighs it against
the processes of its own session. Each switch daemon and each Mininet host's worker is its
own session (setsid), so a daemon at nice -10 still got one share in ~30, like every
worker; a session's group has a niceness of its own (/proc/PID/autogroup), which `urgent`
raises too. Real time: the reroute's own threads run SCHED_FIFO inside the block, so none
of its Python waits for a time slice behind the switches it raised; a switch daemon is
SCHED_FIFO (below them) while it holds its ports (softswitch/daemon_commands.py, `ports_hold`: it
does nothing but serve its control socket then), so a command to a held switch is served
the moment it arrives. A reroute raises the daemons it has just sent a hold to real-time
itself, so that each serves its first batch after at most one port's frames instead of
waiting its turn behind the others' traffic; a daemon leaves real time when its hold ends
(released, or its deadline: a controller that dies mid-reroute leaves none behind). The
kernel's real-time throttling (sched_rt_runtime_us) bounds what a real-time thread can take.
"""

from __future__ import annotations

import os
import threading
from contextlib import contextmanager

URGENT_NICE = -10
URGENT_RT = 2            # SCHED_FIFO priority of a reroute's threads
HOLD_RT = 1              # ... and of a switch daemon holding its ports (below them: they send its commands)


def raise_thread_priority(nice: int = URGENT_NICE) -> int | None:
    """Set this thread's niceness to `nice` (Linux: per thread); returns the one before,
    or None when not allowed (then nothing changed)."""
    tid = threading.get_native_id()
    try:
        before = os.getpriority(os.PRIO_PROCESS, tid)
        os.setpriority(os.PRIO_PROCESS, tid, nice)
    except (OSError, AttributeError):
        return None
    return before


def _threads() -> list[int]:
    """This process's threads (Linux: /proc/self/task)."""
    try:
        return [int(t) for t in os.listdir("/proc/self/task")]
    except OSError:
        return [threading.get_native_id()]


def autogroup(pid: int) -> tuple[str, int] | None:
    """(name, niceness) of the autogroup of process `pid` ("/autogroup-42", 0), or None
    (no such process, or a kernel without autogroups)."""
    try:
        with open(f"/proc/{pid}/autogroup") as f:
            name, _, nice = f.read().split()
        return name, int(nice)
    except (OSError, ValueError):
        return None


def set_autogroup_nice(pid: int, nice: int) -> bool:
    """Give the autogroup of process `pid` niceness `nice` (lower than now: root only)."""
    try:
        with open(f"/proc/{pid}/autogroup", "w") as f:
            f.write(str(nice))
        return True
    except OSError:
        return False


def real_time(tid: int, priority: int) -> tuple | None:
    """Thread or process `tid` to SCHED_FIFO at `priority`; returns (policy, priority) it had,
    or None when not allowed (or already real-time)."""
    try:
        policy = os.sched_getscheduler(tid)
        if policy in (os.SCHED_FIFO, os.SCHED_RR):
            return None
        before = (policy, os.sched_getparam(tid).sched_priority)
        os.sched_setscheduler(tid, os.SCHED_FIFO, os.sched_param(priority))
    except (OSError, AttributeError):
        return None
    return before


def restore_scheduler(tid: int, before: tuple) -> None:
    """Undo real_time(tid, ...) (a thread that is gone is skipped)."""
    try:
        os.sched_setscheduler(tid, before[0], os.sched_param(before[1]))
    except OSError:
        pass


def not_real_time(tid: int = 0) -> None:
    """Thread or process `tid` (0: the caller) back to SCHED_OTHER if it is real-time."""
    try:
        if os.sched_getscheduler(tid) in (os.SCHED_FIFO, os.SCHED_RR):
            os.sched_setscheduler(tid, os.SCHED_OTHER, os.sched_param(0))
    except (OSError, AttributeError):
        pass


@contextmanager
def urgent(pids=(), nice: int = URGENT_NICE, ahead: int = 5, rt: int = URGENT_RT, own: bool = True,
           pids_rt: int | None = None):
    """Every thread of this process SCHED_FIFO at `rt` (real_time) inside the block, and the
    processes `pids` at niceness `nice`, their autogroups too, this process's autogroup
    `ahead` steps further (module docstring); as before after it (one that is gone by then is
    skipped). Every thread, not just the caller: a thread left behind can hold the GIL the
    caller waits for. The caller's thread first: the rest is done at its priority.
    `own=False`: only the processes `pids` (this process is left alone: a reroute it starts
    meanwhile raises it, and must not be lowered again when this block ends). `pids_rt`: the
    processes `pids` SCHED_FIFO at that priority as well (switch daemons about to hold: see
    the module docstring)."""
    me = threading.get_native_id()
    mine = [me, *(t for t in _threads() if t != me)] if own else []
    fifo = [(t, was) for t in mine if (was := real_time(t, rt))]
    if pids_rt is not None:
        fifo += [(p, was) for p in pids if (was := real_time(p, pids_rt))]
    held = [(key, level) for pid, level in [*((t, nice - ahead) for t in mine), *((p, nice) for p in pids)]
            if _hold(key := ("nice", pid), level)]
    groups: dict[str, tuple[int, int]] = {}      # autogroup -> (a pid in it, wanted)
    for pid, level in [*([(os.getpid(), nice - ahead)] if own else []), *((p, nice) for p in pids)]:
        got = autogroup(pid)
        if got is not None:
            first, wanted = groups.get(got[0], (pid, level))
            groups[got[0]] = (first, min(wanted, level))
    held += [(key, wanted) for name, (pid, wanted) in groups.items() if _hold(key := ("autogroup", name, pid), wanted)]
    try:
        yield
    finally:
        for key, level in reversed(held):
            _let_go(key, level)
        for tid, was in reversed(fifo):       # the caller's thread last
            restore_scheduler(tid, was)


# -- holds on a niceness: blocks that overlap without nesting -------------------------------
# A link failure's strike raises this process and its link's shells (emulation/failures.py)
# until the job has seen the failure; the reroute that follows raises every thread of this
# process further and usually ends after the strike's block. Each block restored what it had
# seen on entering, so the strike put the process back to 0 and then the reroute "back" to
# the strike's -10: the process, its autogroup and every thread and child it made afterwards
# stayed raised for good (seen in a test session's pytest after an in-process reroute).
# So a niceness held by several blocks is the most urgent they ask for, and the one it had
# before the first of them comes back when the last lets go.
_holds_lock = threading.Lock()
_holds: dict[tuple, tuple[int, list[int]]] = {}      # (kind, pid or name) -> (niceness before the first hold, levels held)


def _read(key: tuple) -> int:
    if key[0] == "nice":
        return os.getpriority(os.PRIO_PROCESS, key[1])
    got = autogroup(key[2])
    if got is None or got[0] != key[1]:
        raise OSError(f"no autogroup {key[1]} for pid {key[2]}")
    return got[1]


def _write(key: tuple, nice: int) -> None:
    if key[0] == "nice":
        os.setpriority(os.PRIO_PROCESS, key[1], nice)
    elif not set_autogroup_nice(key[2], nice):
        raise OSError(f"autogroup of pid {key[2]} not set")


def _hold(key: tuple, level: int) -> bool:
    """Hold `key` (("nice", pid) or ("autogroup", name, a pid in it)) at niceness `level` or
    lower; False, and nothing held, when it already is without a hold or cannot be changed.
    An autogroup is one hold however it is reached (by name: blocks find it through
    different processes)."""
    with _holds_lock:
        try:
            if key[:2] in _holds:
                base, levels = _holds[key[:2]]
                if level < min(levels):
                    _write(key, level)
            else:
                base, levels = _read(key), []
                if base <= level:
                    return False
                _write(key, level)
        except OSError:
            return False
        _holds[key[:2]] = (base, [*levels, level])
    return True


def _let_go(key: tuple, level: int) -> None:
    """End one hold taken by _hold: the most urgent level still held, or the niceness from
    before the first hold once none is (a process that is gone by then is skipped)."""
    with _holds_lock:
        base, levels = _holds.pop(key[:2])
        levels.remove(level)
        if levels:
            _holds[key[:2]] = (base, levels)
        try:
            if not levels:
                _write(key, base)
            elif min(levels) > level:
                _write(key, min(levels))
        except OSError:
            pass


def as_batch_work() -> bool:
    """Make the calling process (its current and future threads) SCHED_BATCH; True if done.

    For the programs that run in the emulated hosts (the workers): the kernel then never
    lets one of them preempt a running process when it wakes up. Why: eight workers and
    the switch daemons share two cores, and a worker woken by a result used to preempt
    the switch in the middle of its turn; the switch then sat on the next frames while
    the workers took turns, the emulated links went idle and timers fired. A switch is the
    network and must not wait for hosts. Measured (8 x 1M int32 at 20 Mb/s, one switch, two
    runs each): 72 and 113 resends instead of 286 and 921, workers 2.5-2.7 CPU-s instead of
    3.0-3.2, 1.11x the analytic wire time instead of 1.12-1.27x. No privilege is needed."""
    try:
        os.sched_setscheduler(0, os.SCHED_BATCH, os.sched_param(0))
    except (OSError, AttributeError):
        return False
    return True
