"""A reroute's failure record: its cause, its phases, and how a reroute ends (rerouted or
partitioned).

Why here: both reroute paths (steps.py, bulk.py) start a record from the failure's cause and
end it the same way: the record goes to the job's failure log (`Job.record_failure`) and an
event to its log. The record's keys are read by the failure injector (emulation/failures.py)
and the benchmark (agglab/bench.py), through REROUTE_PHASES for the phases.
"""

from __future__ import annotations

import time

from agglab.controller.trees.base import TreeError

# A reroute's phases (ms) in its failure record. Both paths: freeze, snapshot, entries, preload.
# The bulk path (bulk.py) also records boost (the priority change and the switches' pids,
# part of recompute) and splits the rest by round: first_round (the freeze's batch, sent
# to the last answer), preload_build (the final batches built in Python), last_round (sent to
# the last answer).
REROUTE_PHASES = ("freeze_ms", "snapshot_ms", "entries_ms", "preload_ms", "boost_ms", "first_round_ms",
                  "preload_build_ms", "last_round_ms")


def cause(link: str, switch: str | None, t_detect: float) -> dict:
    """A failure record's start: the failed link, or the dead switch."""
    return {"switch": switch, "t_detect": t_detect} if switch else {"link": link, "t_detect": t_detect}


def cause_key(record: dict) -> dict:
    return {"switch": record["switch"]} if "switch" in record else {"link": record["link"]}


def partitioned(job, what: str, exc: TreeError, record: dict, t: float) -> None:
    """No trees span the workers any more: the agents are told to stop with a clear error
    (the epoch file's `partitioned`), instead of hanging."""
    job.partitioned = str(exc)
    job._publish("partitioned", f"{what} failed and the workers are partitioned: {exc}")
    job.events.add("partitioned", **cause_key(record), job=job.job, reason=str(exc))
    record.update(partitioned=True, recompute_ms=round((time.monotonic() - t) * 1e3, 2),
                  t_recovered=time.monotonic())
    job.record_failure(record)


def rerouted(job, record: dict, new, carried, writes: int, phases: dict) -> dict:
    """The new trees are installed and the agents told: the record completed (phases in ms)
    and logged, and the standby trees computed for the new trees' failures."""
    job._failed_reroute = False
    if carried.conflicts:
        job.events.add("sparse_carry_conflict", columns=len(carried.conflicts),
                       switches=",".join(sorted({sw for *_, sw in carried.conflicts})),
                       why="workers and child switches below one switch need different rounds")
    record.update(epoch=new.epoch, preloaded_slots=carried.slots, register_writes=writes,
                  kept_in_place=carried.in_place,
                  t_recovered=time.monotonic(),       # the agents were told the new epoch
                  **{k: round(v * 1e3, 2) for k, v in phases.items()})
    job.record_failure(record)
    job.events.add("rerouted", **cause_key(record), job=job.job, epoch=new.epoch, trees=len(new.trees),
                   recompute_ms=record["recompute_ms"], install_ms=record["install_ms"],
                   preloaded=carried.slots,
                   **{k: record[k] for k in ("freeze_ms", "snapshot_ms", "entries_ms", "preload_ms")})
    job._precompute()
    return record
