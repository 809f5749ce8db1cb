"""SIGINT, SIGTERM and SIGHUP stop any agglab command the same clean way.

Here in ground/ because every program needs it: the `agglab` commands (agglab/cli.py) and
`python -m agglab.experiments`, which `agglab experiment` becomes by exec (so it installs its own).

Why: `kill` (SIGTERM) or a closed terminal (SIGHUP) used to end the process at once,
leaving interfaces, switch and worker processes behind until `agglab clean`, while
Ctrl-C unwound the `with Session(...)` blocks and cleaned up. Turning the two other
signals into the same exception makes every command's own clean-up run, whatever the
moment, and the exit status says which signal it was (128 + signal number: 130, 143, 129).
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from agglab.ground.rundir import Refused

HANDLED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class Interrupted(KeyboardInterrupt):
    """A stop signal arrived; a KeyboardInterrupt so code that already handles Ctrl-C
    (finally blocks, context managers, the experiment runner) handles these too."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


# Functions Python calls around every fork (os.fork, Popen with a preexec_fn): an exception
# raised inside one is printed as "Exception ignored" and dropped, and logging's would also
# keep its module lock held, so the next thread to log (the netlink link monitor) hangs.
_FORK_CALLBACKS = frozenset(f.__code__ for name in ("_acquireLock", "_releaseLock", "_prepareFork", "_afterFork")
                            if hasattr(f := getattr(logging, name, None), "__code__"))


def _in_fork_callback(frame) -> bool:
    while frame is not None:
        if frame.f_code in _FORK_CALLBACKS:
            return True
        frame = frame.f_back
    return False


_held: list[int] = []      # signals that arrived inside deferred() blocks (main thread only)
_holding = 0               # how deep the main thread is in deferred() blocks


def _stop_listening() -> None:
    """Ignore repeats while the clean-up runs: a second Ctrl-C must not cut it short."""
    for sig in HANDLED:
        signal.signal(sig, signal.SIG_IGN)


def _raise(signum, frame) -> None:
    if _holding:
        _held.append(signum)
        return
    if _in_fork_callback(frame):
        # Not here, where it would be swallowed: the signal is sent again a moment later, once
        # the fork has returned to the code that asked for it. From another thread: sent from
        # here it would be handled at once, still inside the callback, and recurse.
        again = threading.Timer(0.001, os.kill, (os.getpid(), signum))
        again.daemon = True
        again.start()
        return
    _stop_listening()
    raise Interrupted(signum)


@contextmanager
def deferred() -> Iterator[None]:
    """Hold a stop signal until the block ends, then raise it: for a step that must happen
    wholly or not at all, such as making a network namespace.

    Why: a signal while Popen waits for its child's exec raises out of Popen() with the child
    still running and nobody to kill it; the `ip` making the run's namespace then made it after
    the clean-up had looked for it, and the namespace outlived the command (a SIGTERM during
    `agglab allreduce`'s set-up, in CI). Only the main thread, where Python runs signal
    handlers, holds them; elsewhere the block runs as it is."""
    global _holding
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _holding += 1
    try:
        yield
    finally:
        _holding -= 1
        if not _holding and _held:
            signum = _held[0]
            _held.clear()
            _stop_listening()
            raise Interrupted(signum)


def arm() -> dict:
    """Turn the stop signals into Interrupted from now on; returns the previous handlers."""
    return {sig: signal.signal(sig, _raise) for sig in HANDLED}


def signum_of(exc: KeyboardInterrupt) -> int:
    return exc.signum if isinstance(exc, Interrupted) else int(signal.SIGINT)


def interrupted_line(command: str, signum: int, what: str = "everything it started was stopped and removed") -> str:
    return f"agglab {command}: interrupted by {signal.Signals(signum).name}; {what}"


def run_interruptible(command: str, func: Callable[[], int]) -> int:
    """Run `func` with the stop signals turned into Interrupted; on one, say what was
    interrupted in one line (after the clean-up ran) and return 128 + the signal number."""
    previous = arm()
    try:
        return func()
    except Refused as exc:          # another network holds the machine, an unsafe run directory
        print(f"agglab {command}: {exc}", file=sys.stderr, flush=True)
        return exc.exit_code
    except KeyboardInterrupt as exc:
        signum = signum_of(exc)
        print(interrupted_line(command, signum), file=sys.stderr, flush=True)
        return 128 + signum
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
