"""A start gate for the worker processes of one run: they get ready, then start together.

Why: a worker process spends a few hundred milliseconds of CPU importing numpy, building its
input and binding its socket, and eight of them do so on two cores while the first ones
already send. An allreduce cannot finish before its last worker starts, so a worker that
started early measures its peers' start-up as network time: on a 0.2 s sparse allreduce that
is most of the figure. Real training jobs call allreduce in processes that have long been
running; the emulator should time the same thing. So the session opens the gate only once
every worker said it is ready, and each worker times its allreduce from the moment it passes.

How: two pipes, inherited by every worker (`pass_fds`, their numbers in AGGLAB_START_FDS).
A ready worker writes one byte to the first and then waits for the second to reach end of
file; the session counts the bytes and, when all workers are in (or one died, or the wait
timed out), closes its end of the second pipe, which wakes every worker at once. A session
that dies also closes it, so no worker can wait forever. Processes started without the
variable (the lab's own commands, tests, a user's script) pass straight through.
"""

from __future__ import annotations

import os
import time
from typing import Callable

from agglab.ground.fdwait import readable

ENV = "AGGLAB_START_FDS"


class StartGate:
    """The session's side: `env` and `fds` for each worker's Popen, then `open_when_ready`."""

    def __init__(self) -> None:
        self._ready_r, self._ready_w = os.pipe()
        self._go_r, self._go_w = os.pipe()
        self.fds = (self._ready_w, self._go_r)
        self.env = {ENV: f"{self._ready_w},{self._go_r}"}
        self.seen = 0

    def open_when_ready(self, workers: int, alive: Callable[[], bool], timeout: float) -> bool:
        """Wait until `workers` processes said they are ready (False if one exited, as told by
        `alive()`, or `timeout` seconds passed), then open the gate. True if all were ready."""
        for fd in self.fds:                       # the workers hold their copies now
            os.close(fd)
        self.fds = ()
        deadline = time.monotonic() + timeout
        try:
            while self.seen < workers and time.monotonic() < deadline and alive():
                if readable([self._ready_r], 0.05):
                    got = os.read(self._ready_r, 4096)
                    if not got:                   # every worker closed its end: none will come
                        break
                    self.seen += len(got)
        finally:
            self.close()
        return self.seen >= workers

    def close(self) -> None:
        """Open the gate (if not yet) and release every descriptor; safe to repeat."""
        for fd in (*self.fds, self._ready_r, self._go_w):
            if fd >= 0:
                try:
                    os.close(fd)
                except OSError:
                    pass
        self.fds, self._ready_r, self._go_w = (), -1, -1


def wait_to_start(timeout: float, environ=os.environ) -> float:
    """The worker's side: say ready, wait for the gate (at most `timeout` s); returns the
    seconds waited. Without AGGLAB_START_FDS it returns 0.0 at once."""
    value = environ.get(ENV)
    if not value:
        return 0.0
    ready, go = (int(x) for x in value.split(","))
    start = time.monotonic()
    try:
        os.write(ready, b"r")
    except OSError:
        pass                                      # the session is gone: start now
    finally:
        _close(ready)
    try:
        readable([go], timeout)                   # readable at end of file: the gate opened
    finally:
        _close(go)
    return time.monotonic() - start


def _close(fd: int) -> None:
    try:
        os.close(fd)
    except OSError:
        pass
