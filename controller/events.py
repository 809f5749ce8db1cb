"""The controller's timestamped event log (shown by the lab's `events` command and
written next to every run), so users can see detection, recompute and install times."""

from __future__ import annotations

import threading
import time


class EventLog:
    def __init__(self, echo=None):
        self.t0 = time.monotonic()
        self.events: list[tuple[float, str, dict]] = []
        self._lock = threading.Lock()
        self.echo = echo                 # optional callable(str) for live output
        self.words = None                # optional callable(t0, t, kind, info) -> the echoed line (the lab's)

    def add(self, kind: str, t: float | None = None, **info) -> None:
        t = time.monotonic() if t is None else t
        with self._lock:
            self.events.append((t, kind, info))
        if self.echo:
            self.echo(self.words(self.t0, t, kind, info) if self.words else self.format_one(t, kind, info))

    def format_one(self, t: float, kind: str, info: dict) -> str:
        details = " ".join(f"{k}={v}" for k, v in info.items())
        return f"{t - self.t0:9.3f}s  {kind:<18} {details}"

    def of_kind(self, kind: str) -> list[tuple[float, dict]]:
        """(time, details) of every event of one kind, oldest first."""
        with self._lock:
            return [(t, info) for t, k, info in self.events if k == kind]

    def lines(self, last: int | None = None, fmt=None) -> list[str]:
        """The last `last` events (all if None), each by format_one or fmt(t0, t, kind, info)."""
        with self._lock:
            events = list(self.events)
        if last:
            events = events[-last:]
        return [fmt(self.t0, *e) if fmt else self.format_one(*e) for e in events]
