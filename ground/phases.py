"""Seconds per named step of something that runs in steps (the network's start-up).

Why: a total alone ("built in 17 s") does not say which step to make faster; `make bench`
prints the steps beside it (agglab/bench/scale.py).
"""

from __future__ import annotations

import contextlib
import time


class Phases(dict):
    """step name -> seconds, in the order the steps ran; a step run twice adds up."""

    @contextlib.contextmanager
    def timed(self, name: str):
        t = time.monotonic()
        try:
            yield
        finally:
            self[name] = round(self.get(name, 0.0) + time.monotonic() - t, 3)

    def text(self) -> str:
        """`a 1.2, b 0.3` (seconds, one decimal)."""
        return ", ".join(f"{name} {seconds:.1f}" for name, seconds in self.items())
