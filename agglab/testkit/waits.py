"""Wait on an event, not on the clock: poll a condition until it holds.

Why: a test that sleeps a fixed time and then asserts passes on an idle machine and fails on a
busy one (or passes without the event having happened at all). The rule (docs/guide/testing.md)
is to wait for the event itself, with a deadline generous enough that only a hung test reaches
it; tests/test_hygiene.py keeps bare sleeps out of the tests, and this is the one poll loop
they share.
"""

from __future__ import annotations

import time
from typing import Callable, TypeVar

T = TypeVar("T")

HUNG = 60.0          # seconds: the default deadline, reached only by a test that is stuck


def wait_until(cond: Callable[[], T], timeout: float = HUNG, what: str | Callable[[], str] = "the condition",
               every: float = 0.01) -> T:
    """Call `cond` until it returns something true and return that; AssertionError naming
    `what` (or what it returns, e.g. a log's tail, when a function) if it has not after
    `timeout` seconds (a hang guard, never a timing check). An exception `cond` raises (an
    assert that the awaited process is still alive) ends the wait at once."""
    end = time.monotonic() + timeout
    while True:
        got = cond()
        if got:
            return got
        if time.monotonic() >= end:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what() if callable(what) else what}")
        time.sleep(every)
