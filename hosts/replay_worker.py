"""Entry point of one rank replaying a scheduler's allreduces inside a Mininet host.

`python -m agglab.hosts.replay_worker run.json RANK transfers.json`: the file lists, in the order
a scheduler chose (pace/schedule.py), each transfer's ready time (seconds since the
iteration starts, already dilated to emulated time: the simulated compute) and its element
count (already shrunk). The rank sleeps until a transfer is ready, allreduces that many
values through the emulated network (hosts/communicator.py), and records when it really
started and ended. Every rank replays the same list, so the collectives always match.

`python -m agglab.hosts.replay_worker run.json RANK INBOX/` (a directory): the rank stays up and
replays one list after another, `INBOX/000.json`, `001.json`, ... as the parent writes them
(each atomically), answering each with `INBOX/NNN.rankR.json`, until a list says
`{"stop": true}`. Why: a PACE run calibrates the network's cost and then replays FIFO's and
PACE's plans; with one process per phase every phase paid the agents' start-up (imports,
socket, a warm-up call) and began with cold state; one communicator for the whole run keeps
its transport, its slots' versions and the job's route across phases, as a training job's
agents do across iterations.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import numpy as np

from agglab.hosts.communicator import Communicator, rank_program

POLL_S = 0.002          # how often a serving rank looks for the next list


def replay_work(comm: Communicator, work: dict) -> dict:
    """Replay one list (`iterations` times): per iteration each transfer's (start, end)."""
    transfers, total = work["transfers"], work["iterations"] * len(work["transfers"])
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


def replay(comm: Communicator, path: str) -> dict:
    if Path(path).is_dir():
        return serve(comm, Path(path))
    with open(path) as f:
        work = json.load(f)
    comm.allreduce(np.ones(64, np.int32))          # warm-up: every rank up before timing
    return replay_work(comm, work)


def answer_path(inbox: Path, n: int, rank: int) -> Path:
    return inbox / f"{n:03d}.rank{rank}.json"


def serve(comm: Communicator, inbox: Path) -> dict:
    """Replay the inbox's lists in order until one says stop (module docstring)."""
    comm.allreduce(np.ones(64, np.int32))          # warm-up, once for every list
    n = 0
    while True:
        path = inbox / f"{n:03d}.json"
        while not path.exists():
            time.sleep(POLL_S)
        work = json.loads(path.read_text())
        if work.get("stop"):
            return {"served": n, "calls": comm.calls}
        report = replay_work(comm, work)
        tmp = answer_path(inbox, n, comm.rank).with_suffix(".tmp")
        tmp.write_text(json.dumps(report))
        os.replace(tmp, answer_path(inbox, n, comm.rank))
        n += 1


if __name__ == "__main__":
    raise SystemExit(rank_program("one rank of `agglab train --profile-only` (inside a host)",
                                  "JSON: {iterations, transfers: [{ready_s, elements}, ...]}, or a directory "
                                  "of such lists to serve in turn", replay))
