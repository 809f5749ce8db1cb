"""Entry point of one rank replaying a scheduler's allreduces inside a Mininet host.

`python -m hosts.replay_worker run.json RANK transfers.json`: the file lists, in the order
a scheduler chose (pace/schedule.py), each transfer's ready time (ms since the iteration
starts, already dilated to emulated time: the simulated compute) and its element count
(already shrunk). The rank sleeps until a transfer is ready, allreduces that many values
through the emulated network (hosts/communicator.py), and records when it really started
and ended. Every rank replays the same list, so the collectives always match.
"""

from __future__ import annotations

import argparse
import json
import time
import traceback

import numpy as np

from ground.runspec import RunPlan
from hosts.communicator import Communicator


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="one rank of `agglab train --profile-only` (inside a host)")
    ap.add_argument("plan", help="run.json written by the session (ground/runspec.py RunPlan)")
    ap.add_argument("rank", type=int)
    ap.add_argument("transfers", help="JSON: {iterations, transfers: [{ready_s, elements}, ...]}")
    args = ap.parse_args(argv)
    plan = RunPlan.read(args.plan)
    with open(args.transfers) as f:
        work = json.load(f)
    seat = plan.seats[args.rank]
    report: dict = {"rank": args.rank, "ok": False}
    try:
        comm = Communicator(plan, args.rank)
        comm.allreduce(np.ones(64, np.int32))          # warm-up: every rank up before timing
        iterations, retx = [], 0
        for it in range(work["iterations"]):
            spans, t0 = [], time.monotonic()
            for k, tr in enumerate(work["transfers"]):
                wait = tr["ready_s"] - (time.monotonic() - t0)
                if wait > 0:
                    time.sleep(wait)                    # the simulated backward compute
                start = time.monotonic() - t0
                comm.allreduce(np.full(tr["elements"], 1 + args.rank, np.int32))
                spans.append((start, time.monotonic() - t0))
                retx += comm.last_stats.retransmissions
                comm.progress(it * len(work["transfers"]) + k + 1, work["iterations"] * len(work["transfers"]))
            iterations.append(spans)
        report.update(ok=True, iterations=iterations, retransmissions=retx)
    except Exception as exc:  # reported to the parent by rank, with the reason
        report.update(error=f"{type(exc).__name__}: {exc}", traceback=traceback.format_exc())
    with open(seat.out + ".json", "w") as f:
        json.dump(report, f)
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
