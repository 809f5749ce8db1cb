"""Jobs that train (`--iterations`, `--compute-ms`, `--job-offsets`): one rank's loop of
compute then allreduce, and the figures a job's throughput is read from.

Why: ATP's shared pool gains over static partitions because jobs alternate compute and
communication, so a job's aggregators idle while it computes and another job can use them
(ATP, NSDI'21). One allreduce per job has no such idle time. The compute is a sleep of the
emulated compute time (the session resolves a PACE profile into `compute_ms`,
emulation/training_jobs.py): the emulated GPU does nothing the host's CPU must do, so it
takes no CPU from the switches. A job starts after its offset (staggered starts), and its
clock starts then: iterations/s is iterations over the time from its first compute to
its last result.
"""

from __future__ import annotations

import time


def run_iterations(call, spec, tenant: int, sleep=time.sleep, clock=time.monotonic):
    """Wait the job's offset, then `spec.iterations` times: compute (sleep), `call()` (the
    allreduce: (result, stats dict)). Returns the last result and stats: the counters summed
    over iterations, `seconds` the job's training time, per-iteration allreduce times."""
    sleep(spec.offset_of(tenant))
    compute_s = (spec.compute_ms or 0.0) / 1e3
    started = clock()
    result, total, calls, ends = None, {}, [], []
    for _ in range(spec.iterations):
        if compute_s:
            sleep(compute_s)
        t = clock()
        result, stats = call()
        calls.append(round(clock() - t, 6))
        ends.append(round(clock() - started, 6))
        for k in ("packets_sent", "retransmissions", "duplicates_ignored", "ps_fallback_packets", "ps_packets"):
            if k in stats:
                total[k] = total.get(k, 0) + stats[k]
        if stats.get("rtt_min") is not None:       # the path's round trip: the least of every call's
            total["rtt_min"] = min(total.get("rtt_min", stats["rtt_min"]), stats["rtt_min"])
    seconds = clock() - started
    return result, {**stats, **total, "seconds": seconds, "iterations": spec.iterations,
                    "compute_ms": spec.compute_ms or 0.0, "offset_s": spec.offset_of(tenant),
                    "allreduce_seconds": calls, "iteration_ends": ends,
                    "iterations_per_s": spec.iterations / seconds if seconds > 0 else None}
