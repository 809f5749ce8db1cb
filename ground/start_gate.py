"""The gates of one run's worker processes: they get ready, then start together; they finish,
then leave together.

Why a start gate: a worker process spends a few hundred milliseconds of CPU importing numpy,
building its input and binding its socket, and eight of them do so on two cores while the
first ones already send. An allreduce cannot finish before its last worker starts, so a
worker that started early measures its peers' start-up as network time: on a 0.2 s sparse
allreduce that is most of the figure. Real training jobs call allreduce in processes that
have long been running, and a benchmark (nccl-tests, OSU) starts its clock after a barrier;
the emulator times the same thing. So the session opens the gate only once every worker
said it is ready, and each worker says so only once its call's state is built (its input,
socket, connections, and the call's own per-array set-up: hosts/communicator.py `ready`),
then times its allreduce from the moment it passes.

Why an end gate: the collective ends when every rank holds the result. A rank that has it
and goes on to write its result (4 MiB to disk), its report and exit keeps one of the two
cores for milliseconds, and its peers, woken by the same final result but batch-scheduled
(ground/priority.py), wait for the next scheduler tick (4 ms) before they read it: the last
rank's time then counts its peers' clean-up. So a rank that has its result and its time
says so on a second pair of pipes and blocks until every rank has (or one exited), and only
then writes its files. What it measured is unchanged; what it no longer does is take a core
from a peer that has not yet read its result.

How: two pipes a gate, inherited by every worker (`pass_fds`, their numbers in
AGGLAB_START_FDS and AGGLAB_END_FDS). An arriving worker writes one byte to the first and
then waits for the second to reach end of file; the session counts the bytes and, when all
workers are in (or one died, or the wait timed out), closes its end of the second pipe,
which wakes every worker at once. A session that dies also closes it, so no worker can wait
forever. Processes started without the variable (the lab's own commands, tests, a user's
script, a cluster's workers for the end gate: its pipes do not cross ssh) pass straight
through.
"""

from __future__ import annotations

import os
import time
from typing import Callable

from agglab.ground.fdwait import readable

ENV = "AGGLAB_START_FDS"
END_ENV = "AGGLAB_END_FDS"


class _Pipes:
    """One gate's two pipes: workers write to `arrive`, wait on `go`; the session counts `seen`."""

    def __init__(self, env: str) -> None:
        self._arrive_r, arrive_w = os.pipe()
        go_r, self._go_w = os.pipe()
        self.fds = (arrive_w, go_r)               # the workers' copies, closed here once they hold them
        self.env = {env: f"{arrive_w},{go_r}"}
        self.seen = 0
        self.open = False

    def drop_workers_copies(self) -> None:
        for fd in self.fds:
            _close(fd)
        self.fds = ()

    def count(self, timeout: float) -> bool:
        """Read the arrivals that come within `timeout` s; False once no worker can arrive (every
        copy of the first pipe's write end closed)."""
        if readable([self._arrive_r], timeout):
            got = os.read(self._arrive_r, 4096)
            if not got:
                return False
            self.seen += len(got)
        return True

    def release(self) -> None:
        """Open the gate (if not yet) and release every descriptor; safe to repeat."""
        self.drop_workers_copies()
        for fd in (self._arrive_r, self._go_w):
            _close(fd)
        self._arrive_r, self._go_w, self.open = -1, -1, True


class StartGate:
    """The session's side of both gates: `env` and `fds` for each worker's Popen (the start
    gate's two first: a cluster's network carries only those, over ssh), `open_when_ready`
    once all are started, then `open_end_when_done` polled while they run."""

    def __init__(self) -> None:
        self._start, self._end = _Pipes(ENV), _Pipes(END_ENV)
        self.fds = self._start.fds + self._end.fds
        self.env = {**self._start.env, **self._end.env}

    @property
    def seen(self) -> int:
        """Workers that said they are ready."""
        return self._start.seen

    @property
    def finished(self) -> int:
        """Workers that said they have their result."""
        return self._end.seen

    def open_when_ready(self, workers: int, alive: Callable[[], bool], timeout: float) -> bool:
        """Wait until `workers` processes said they are ready (False if one exited, as told by
        `alive()`, or `timeout` seconds passed), then open the gate. True if all were ready."""
        self._start.drop_workers_copies()         # the workers hold their copies now
        self._end.drop_workers_copies()
        self.fds = ()
        deadline = time.monotonic() + timeout
        try:
            while self._start.seen < workers and time.monotonic() < deadline and alive():
                if not self._start.count(0.05):   # every worker closed its end: none will come
                    break
        finally:
            self._start.release()
        return self._start.seen >= workers

    def open_end_when_done(self, workers: int, alive: Callable[[], bool], timeout: float = 0.0) -> bool:
        """Count the workers that have their result (waiting at most `timeout` s for the first
        arrival; the session polls it with none), and open the end gate once all `workers`
        have or one exited (`alive()` False). True once it is open."""
        if not self._end.open:
            more, wait = True, timeout
            while more and self._end.seen < workers:
                before = self._end.seen
                more, wait = self._end.count(wait), 0.0     # False: every worker closed its end
                if more and self._end.seen == before:
                    break                         # nothing more right now
            if not more or self._end.seen >= workers or not alive():
                self._end.release()
        return self._end.open

    def close(self) -> None:
        """Open both gates (if not yet) and release every descriptor; safe to repeat."""
        self._start.release()
        self._end.release()
        self.fds = ()


def wait_to_start(timeout: float, environ=os.environ) -> float:
    """The worker's side of the start gate: say ready, wait for the gate (at most `timeout`
    s); returns the seconds waited. Without AGGLAB_START_FDS it returns 0.0 at once."""
    return _wait_at(environ.get(ENV), timeout)


def wait_at_end(timeout: float, environ=os.environ) -> float:
    """The worker's side of the end gate: say it has its result, wait until every worker has
    (at most `timeout` s); returns the seconds waited. Without AGGLAB_END_FDS, 0.0 at once."""
    return _wait_at(environ.get(END_ENV), timeout)


def _wait_at(value: str | None, timeout: float) -> float:
    if not value:
        return 0.0
    arrive, go = (int(x) for x in value.split(","))
    start = time.monotonic()
    try:
        os.write(arrive, b"r")
    except OSError:
        pass                                      # the session is gone: go on now
    finally:
        _close(arrive)
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
