"""Run one function per rank in threads, as the in-process tests of several modules do."""

from __future__ import annotations

import threading


def on_threads(n: int, work) -> list:
    """work(rank) on n threads; their results by rank. Raises the first exception a rank
    raised, and fails if a rank is still running after 120 s (a hang guard, not a timing)."""
    out: list = [None] * n

    def run(r):
        try:
            out[r] = work(r)
        except BaseException as exc:      # checked by the caller
            out[r] = exc

    threads = [threading.Thread(target=run, args=(r,), daemon=True) for r in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not any(t.is_alive() for t in threads), "a rank is stuck"
    for o in out:
        if isinstance(o, BaseException):
            raise o
    return out
