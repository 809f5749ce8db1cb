"""Run the calling thread, and for a while given processes, ahead of the rest (Linux, as root).

Why: a reroute (controller/job.py) is a few tens of milliseconds of Python on a machine
whose two cores are shared by 20 software switches, the workers and whatever else runs; at
the default niceness every millisecond of its own work waits its turn behind them, and so
does the link monitor's wake-up on a netlink event. The reroute's rounds wait for the
slowest switch's answer, so the switch daemons are raised too while it runs (`urgent(pids)`).
Without the privilege (not root) nothing changes.
"""

from __future__ import annotations

import os
import threading
from contextlib import contextmanager

URGENT_NICE = -10


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


@contextmanager
def urgent(pids=(), nice: int = URGENT_NICE, ahead: int = 5):
    """The processes `pids` at niceness `nice` inside the block, and every thread of this
    process `ahead` steps further (the caller's work must not wait behind the processes it
    raised); as before after it (one that is gone by then is skipped). Every thread, not just
    the caller: a thread left behind can hold the GIL the caller waits for."""
    raised = []
    for pid, level in [*((t, nice - ahead) for t in _threads()), *((p, nice) for p in pids)]:
        try:
            was = os.getpriority(os.PRIO_PROCESS, pid)
            if was > level:
                os.setpriority(os.PRIO_PROCESS, pid, level)
                raised.append((pid, was))
        except OSError:
            pass
    try:
        yield
    finally:
        for pid, was in raised:
            try:
                os.setpriority(os.PRIO_PROCESS, pid, was)
            except OSError:
                pass
