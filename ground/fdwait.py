"""Wait for descriptors to become readable with poll(), never select().

Why: select() takes no descriptor at or above FD_SETSIZE (1024) and raises ValueError for
one. A process that builds a large Mininet network holds more than that (two pty ends per
node, a pidfd per process it started: a k=8 fat-tree has 208 nodes), and Mininet starts
every node's shell with close_fds=False, so the workers inherit as many. A wait that
works on a small network then fails on a large one, or after a long suite's many runs.
poll() has no such limit; its timeout is whole milliseconds (rounded up here).
"""

from __future__ import annotations

import math
import select
from typing import Any, Iterable


def readable(fds: Iterable[Any], timeout: float | None) -> list[Any]:
    """Those of `fds` (ints or objects with fileno()) that are readable (or hung up or in
    error: a read will tell which) within `timeout` seconds (None: until one is), in the
    form they were given."""
    by_fd = {}
    poll = select.poll()
    for f in fds:
        fd = f if isinstance(f, int) else f.fileno()
        by_fd[fd] = f
        poll.register(fd, select.POLLIN | select.POLLPRI)
    if not by_fd:
        return []
    ms = None if timeout is None else math.ceil(max(0.0, timeout) * 1000)
    return [by_fd[fd] for fd, _events in poll.poll(ms) if fd in by_fd]
