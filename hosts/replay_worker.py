"""Entry point of one rank replaying a scheduler's allreduces inside a Mininet host.

`python -m hosts.replay_worker run.json RANK transfers.json`: the file lists, in the order
a scheduler chose (pace/schedule.py), each transfer's ready time (seconds since the
iteration starts, already dilated to emulated time: the simulated compute) and its element
count (already shrunk). The rank sleeps until a transfer is ready, allreduces that many
values through the emulated network (hosts/communicator.py), and records when it really
started and ended. Every rank replays the same list, so the collectives always match.
"""

from __future__ import annotations

import json
import time

import numpy as np

from hosts.communicator import Communicator, rank_program


def replay(comm: Communicator, path: str) -> dict:
    with open(path) as f:
        work = json.load(f)
    transfers, total = work["transfers"], work["iterations"] * len(work["transfers"])
    comm.allreduce(np.ones(64, np.int32))          # warm-up: every rank up before timing
    iterations, retx = [], 0
    for it in range(work["iterations"]):
        spans, t0 = [], time.monotonic()
        for k, tr in enumerate(transfers):
            wait = tr["ready_s"] - (time.monotonic() - t0)
            if wait > 0:
                time.sleep(wait)                    # the simulated backward compute
            start = time.monotonic() - t0
            comm.allreduce(np.full(tr["elements"], 1 + comm.rank, np.int32))
            spans.append((start, time.monotonic() - t0))
            retx += comm.last_stats.retransmissions
            comm.progress(it * len(transfers) + k + 1, total)
        iterations.append(spans)
    return {"iterations": iterations, "retransmissions": retx}


if __name__ == "__main__":
    raise SystemExit(rank_program("one rank of `agglab train --profile-only` (inside a host)",
                                  "JSON: {iterations, transfers: [{ready_s, elements}, ...]}", replay))
