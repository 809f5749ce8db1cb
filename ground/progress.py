"""A worker's progress file: 'done total' blocks, rewritten in place as the allreduce goes.

Why its own format module: the worker writes it (hosts/worker.py), the failure injector
(emulation/failures.py) and the progress bar (emulation/workers.py) read it, from other
processes and namespaces; the only thing they share is the filesystem.

Why in place: the first version wrote a temporary file and renamed it every 10 ms, which
cost each of eight agents about a fifth of its CPU (open, write, close, rename on ext4,
measured with py-spy at 20 Mb/s): CPU the emulation needs to stay link-bound. Now the file
is opened once and each update is one `pwrite` of a fixed-width line at offset 0, so a
reader never sees a shorter or longer file, only (at worst, mid-write) a mix of two
numbers; `read` therefore reads twice and keeps a value only when both reads agree.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

WIDTH = 12                       # digits per number: blocks of a 2^32-element array fit
INTERVAL = 0.01                  # seconds between two rewrites (the last one always lands)
# ... in a job of at most INTERVAL_WORKERS workers; a larger job's workers rewrite less often,
# so that all of them together write no more often than that many would (never less often than
# INTERVAL_MAX). Why: at 1 Mb/s each of 128 agents found results every few ms and wrote its file
# every 10 ms, 12,800 writes a second on a 2-core machine whose CPU the links' fidelity needs;
# the readers (the progress bar, a failure at a fraction of the blocks) lose little at 80 ms.
INTERVAL_WORKERS = 16
INTERVAL_MAX = 0.1
# ... except the update that crosses a mark (`marks`: the fractions a scripted failure waits for,
# `--fail tree@0.5`): it is written at once. Why: the skipped value is written only with the
# next update after the interval, and the failure injector reads the files; at 128 workers
# (0.08 s) the slowest worker's file showed 50% 0.10 s after the worker had it, 8% of a 1.27 s
# OmniReduce run (docs/measurements.md, 2026-12-07 eighth session).


def interval_for(workers: int) -> float:
    """Seconds between two rewrites of a worker's file in a job of `workers` workers."""
    return min(INTERVAL_MAX, INTERVAL * max(1.0, workers / INTERVAL_WORKERS))


class ProgressFile:
    """Callable `(done, total)`: rewrites the file at most every `interval` seconds (INTERVAL;
    a large job's workers: `interval_for`), and always at the end and when the fraction done
    first reaches one of `marks`."""

    def __init__(self, path: str | Path, interval: float = INTERVAL, marks=()):
        self.path, self.last, self.fd, self.interval = str(path), 0.0, None, interval
        self.marks = sorted(marks)             # the ones not reached yet

    def __call__(self, done: int, total: int) -> None:
        now = time.monotonic()
        crossed = False
        while self.marks and done / max(1, total) >= self.marks[0]:     # as the injector compares
            self.marks.pop(0)
            crossed = True
        if now - self.last < self.interval and done != total and not crossed:
            return
        self.last = now
        if self.fd is None:
            self.fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.pwrite(self.fd, b"%*d %*d\n" % (WIDTH, done, WIDTH, total), 0)
        if done == total:
            self.close()

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def _parse(path: Path) -> tuple[int, int] | None:
    try:
        done, total = path.read_bytes().split()
        return int(done), int(total)
    except (OSError, ValueError):
        return None


def read(path: str | Path) -> tuple[int, int] | None:
    """(done, total) of one worker, or None while it has not reported (or mid-write)."""
    path = Path(path)
    first = _parse(path)
    return first if first is not None and first == _parse(path) else None
