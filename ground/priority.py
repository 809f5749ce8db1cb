"""Run the calling thread ahead of the emulated switches and workers (Linux, as root).

Why: a reroute (controller/job.py) is a few tens of milliseconds of Python on a machine
whose two cores are shared by 20 software switches and the workers; at the default
niceness every millisecond of its own work waits its turn behind them, and so does the
link monitor's wake-up on a netlink event. Without the privilege (not root) nothing changes.
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


@contextmanager
def urgent(nice: int = URGENT_NICE):
    """This thread at niceness `nice` inside the block, as before after it."""
    before = raise_thread_priority(nice)
    try:
        yield
    finally:
        if before is not None:
            try:
                os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), before)
            except OSError:
                pass
