"""A new round held back for a late acknowledgement is released by that ACK, not by a timer.

Why: the switch keeps a slot-version's round until every child is done with it, and a worker
that sits out the next round says so with a header-only ACK. When that worker handles the
result late (on 2 shared cores, a few milliseconds behind the others) and the next round is
short, a participant's packet for the round after it arrives first, is held back (dropped),
and waited a whole retransmission timeout: random blocks, 8 workers at 5 Mb/s, ~800 of
~9,300 rounds per rank completed only by a retransmission, every one of them a long wait
that the timers never learnt (docs/design/sparse.md, "Release").

Here two workers share the real software pipeline on a virtual clock: the test decides when
each worker sees each result. Rank 0 sends blocks 0, 1 and 2 of one column; rank 1 only
block 0, and it handles round 0's result after rank 0 has already sent block 2.
"""

from __future__ import annotations

import numpy as np

from agglab.ground import wire
from agglab.hosts.sparse_agent import SparseRun
from agglab.softswitch.pipeline import Pipeline
from agglab.softswitch.star import star_commands
from agglab.testkit.fakenet import make_frame

K = wire.K
HOLD = wire.CONST["STAT_SP_HOLD"]


class _Held:
    """A worker's link to the shared pipeline: sends go through at once, results are held
    in `inbox` until the test hands them to the agent (on_payload at a time of its choice)."""

    def __init__(self, pipeline: Pipeline, rank: int, inboxes: list[list[bytes]]) -> None:
        self.pipeline, self.rank, self.inboxes = pipeline, rank, inboxes

    def send(self, payload: bytes) -> None:
        for port, frame in self.pipeline.process(self.rank + 1, make_frame(self.rank, payload)):
            self.inboxes[port - 1].append(bytes(frame[wire.AGG_OFFSET:]))

    def recv(self, timeout: float) -> None:
        return None


def _deliver(run: SparseRun, inbox: list[bytes], now: float) -> int:
    """Hand the worker what is held for it at `now` (not what its answers bring back);
    how many were accepted results."""
    waiting = [inbox.pop(0) for _ in range(len(inbox))]
    return sum(run.on_payload(p, now) for p in waiting)


def _held_back(ranks: bool):
    """Rank 0 sends blocks 0, 1 and 2 of one column, rank 1 only block 0 and handles round
    0's result after rank 0 sent block 2 (held back), then ACKs: (pipeline, runs, inboxes,
    data). `ranks`: agg_job names each port's rank (the ports are the workers' own)."""
    pipeline = Pipeline(seed=0)
    for cmd in star_commands(2, ranks=ranks):
        pipeline.command(cmd)
    inboxes: list[list[bytes]] = [[], []]
    data = [np.zeros(3 * K, np.int32), np.zeros(3 * K, np.int32)]
    data[0][[0, K, 2 * K]] = [1, 2, 3]                 # rank 0: blocks 0, 1 and 2 (one column)
    data[1][0] = 10                                    # rank 1: block 0 only
    runs = [SparseRun(data[r], _Held(pipeline, r, inboxes), r, 2, 0, 0, 0, 1, 0.02, 10.0, None, None,
                      None, K, 1 << 24, False) for r in (0, 1)]
    for run in runs:
        run.remaining = run.S
        run.start(0.0)                                 # the leads
    assert _deliver(runs[0], inboxes[0], 0.001) == 1   # lead results: both send block 0
    assert _deliver(runs[1], inboxes[1], 0.001) == 1
    assert _deliver(runs[0], inboxes[0], 0.002) == 1   # round 0 at rank 0: it sends block 1,
    assert _deliver(runs[0], inboxes[0], 0.003) == 1   # which completes alone (rank 1 announced
    #                                                    nothing more); it sends block 2
    assert pipeline.counters["agg_stats"][HOLD] == 1, \
        "block 2 reuses round 0's version, which rank 1 has not acknowledged yet"
    assert _deliver(runs[1], inboxes[1], 0.004) == 2   # rank 1, late: rounds 0 and 1, two ACKs
    return pipeline, runs, inboxes, data


def test_without_a_worker_port_the_held_sender_waits_for_its_timer():
    """A port agg_job does not name a rank for may lead to a switch, which takes only results
    with values from its parent: the root keeps no port to release, rank 0 resends on its timer."""
    pipeline, runs, inboxes, data = _held_back(ranks=False)
    assert inboxes[0] == [] and runs[0].remaining == 1
    runs[0].expire(0.005 + runs[0].rtt.rto)
    assert runs[0].stats.retransmissions == 1 and runs[0].stats.releases == 0
    assert _deliver(runs[0], inboxes[0], 0.03) == 1 and runs[0].remaining == 0


def test_the_late_ack_releases_the_held_round():
    pipeline, runs, inboxes, data = _held_back(ranks=True)
    held = pipeline.counters["agg_stats"][HOLD]
    assert _deliver(runs[0], inboxes[0], 0.005) == 0   # the release (no result): block 2 again
    assert runs[0].stats.releases == 1
    assert _deliver(runs[0], inboxes[0], 0.006) == 1   # round 2's result
    assert runs[0].remaining == 0, "round 2 completed on the release, before any timer"
    assert runs[0].stats.retransmissions == 0
    assert _deliver(runs[1], inboxes[1], 0.006) == 1   # the release (ignored) and round 2
    assert runs[1].remaining == 0 and runs[1].stats.releases == 0   # it had nothing held
    want = (data[0].astype(np.int64) + data[1]).astype(np.int32).reshape(-1, K)
    assert np.array_equal(runs[0].sums, want) and np.array_equal(runs[1].sums, want)
    assert pipeline.counters["agg_stats"][HOLD] == held
