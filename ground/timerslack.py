"""Timer slack: how late the kernel may wake a sleeping thread; the emulator's processes ask
for none, and the wake-up latency they then get can be measured.

Why: every emulated link rate is kept by sleeps, the pacer's (hosts/transport.py: a host
books its link at most half a cburst ahead and wakes to top it up with an eighth left, 0.3 ms
of link time at 20 Mb/s) and the agents' and switches' timed waits. Linux may defer a
sleeper's wake-up by its timer slack so that it can batch timer interrupts: 50 us by
default, per thread, inherited at fork, and set otherwise by whatever started the process
(systemd's TimerSlackNSec=, a container runtime, a power-saving profile). On top of the
scheduler's own wake-up latency, that is a per-machine amount of lateness a pacer with 0.3 ms
of margin either absorbs or turns into an idle link; two machines "of the same kind" can
differ in exactly this. `set_timer_slack(1)` (prctl PR_SET_TIMERSLACK; no privilege needed)
makes the wake-up as prompt as the hardware timer allows, the same everywhere.

`wakeup_latency` measures how late short waits end (select with a timeout, as the pacer
waits): `agglab calibrate` records it with the ceiling, so two machines' ceilings can be
compared with what their kernels did to a sleeping pacer.
"""

from __future__ import annotations

import ctypes
import select
import statistics
import time

PR_SET_TIMERSLACK, PR_GET_TIMERSLACK = 29, 30
PROMPT_NS = 1          # the smallest slack prctl takes (0 means "back to the inherited default")


def _prctl(option: int, value: int = 0) -> int:
    try:
        return ctypes.CDLL(None, use_errno=True).prctl(option, ctypes.c_ulong(value), 0, 0, 0)
    except (OSError, AttributeError):
        return -1


def set_timer_slack(ns: int = PROMPT_NS) -> bool:
    """Set the calling thread's timer slack (and that of the threads and processes it starts
    later); True if the kernel took it."""
    return _prctl(PR_SET_TIMERSLACK, ns) == 0


def timer_slack() -> int | None:
    """The calling thread's timer slack in ns (None where prctl is not available)."""
    value = _prctl(PR_GET_TIMERSLACK)
    return None if value < 0 else value


def wakeup_latency(samples: int = 200, wait_s: float = 200e-6) -> dict:
    """How late `samples` waits of `wait_s` end, in microseconds: median, 90th and 99th
    percentile and the worst (a pacer's margin must cover the high ones)."""
    late = []
    for _ in range(samples):
        t0 = time.monotonic()
        select.select((), (), (), wait_s)
        late.append((time.monotonic() - t0 - wait_s) * 1e6)
    late.sort()
    pick = lambda q: round(late[min(len(late) - 1, int(q * len(late)))], 1)   # noqa: E731
    return {"wait_us": round(wait_s * 1e6, 1), "samples": samples, "median_us": round(statistics.median(late), 1),
            "p90_us": pick(0.9), "p99_us": pick(0.99), "max_us": round(late[-1], 1),
            "timer_slack_ns": timer_slack()}
