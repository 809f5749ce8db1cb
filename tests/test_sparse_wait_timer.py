"""A sparse worker that sits a round out times its wait from the result before, and learns it.

Why: a non-participant's timer runs from the previous result to the next one, which is
longer than any participant's send-to-result latency by the slowest participant's turnaround
(its own queue, its scheduling, its downlink). With only participants sampling (one round in
ten at density 0.1), the timers sat under that wait: at 128 workers with random blocks 18,500
of 44,000 packets were resends, most of them zero probes, and each late probe was multicast
again by the root (tests/softswitch, vector sparse_result_again.yaml).

Here two workers share the real software pipeline on a virtual clock: the test decides when
each worker sees each result, so rank 1 (the only participant of rounds 1 and 2) answers
late and rank 0 waits WAIT seconds for each of those results. After one such wait, rank 0's
timer must outlast the next one: no probe.
"""

from __future__ import annotations

import numpy as np

from agglab.ground import wire
from agglab.hosts.sparse_agent import SparseRun
from agglab.softswitch.pipeline import Pipeline
from agglab.softswitch.star import star_commands
from agglab.testkit.fakenet import make_frame

K = wire.K
WAIT = 0.2          # rank 0's wait for each result of rounds 1 and 2 (result to result)
TURN = 0.15         # of which rank 1 takes this long to send (its send to result: 0.05 s)


class _Held:
    """A worker's link to the shared pipeline: sends go through at once, results are held
    in `inbox` until the test hands them to the agent (on_payload at a time of its choice)."""

    def __init__(self, pipeline: Pipeline, rank: int, inboxes: list[list[bytes]]) -> None:
        self.pipeline, self.rank, self.inboxes = pipeline, rank, inboxes
        self.sent: list[bytes] = []

    def send(self, payload: bytes) -> None:
        self.sent.append(payload)
        for port, frame in self.pipeline.process(self.rank + 1, make_frame(self.rank, payload)):
            self.inboxes[port - 1].append(bytes(frame[wire.AGG_OFFSET:]))

    def recv(self, timeout: float) -> None:
        return None                                    # nothing arrives unless the test hands it


def _one(run: SparseRun, inbox: list[bytes], now: float) -> None:
    """Hand the worker its oldest held result at `now`."""
    assert run.on_payload(inbox.pop(0), now)


def test_a_non_participant_s_timer_outlasts_the_waits_it_has_seen():
    pipeline = Pipeline(seed=0)
    for cmd in star_commands(2):
        pipeline.command(cmd)
    inboxes: list[list[bytes]] = [[], []]
    data = [np.zeros(3 * K, np.int32), np.zeros(3 * K, np.int32)]
    data[0][0] = 1                                     # rank 0: block 0 only
    data[1][[0, K, 2 * K]] = 2                         # rank 1: blocks 0, 1 and 2 (one column: window 1)
    runs = [SparseRun(data[r], _Held(pipeline, r, inboxes), r, 2, 0, 0, 0, 1, 0.02, 10.0, None, None,
                      None, K, 1 << 24, False) for r in (0, 1)]
    for run in runs:
        run.remaining = run.S
        run.start(0.0)                                 # the leads
    _one(runs[0], inboxes[0], 0.01)                    # lead results: both send block 0, which
    _one(runs[1], inboxes[1], 0.01)                    # completes round 0
    _one(runs[0], inboxes[0], 0.02)                    # round 0 at rank 0: it sits out rounds 1, 2
    assert runs[0].packet[0] is None and runs[0].cur[0] == 1
    t = 0.02
    for m in (1, 2):
        assert inboxes[0] == []                        # round m waits for rank 1's block m
        _one(runs[1], inboxes[1], t + TURN)            # rank 1 sees round m-1 late and sends m
        before = runs[0].stats.retransmissions
        runs[0].expire(t + WAIT - 1e-3)                # just before round m's result reaches rank 0
        if m == 2:                                     # (in round 1 it knew only 10 ms round trips)
            assert runs[0].stats.retransmissions == before, "rank 0 probed a wait no longer than the last"
        t += WAIT
        _one(runs[0], inboxes[0], t)
        while inboxes[0]:                              # round 1: the answer to its probe, ignored
            assert not runs[0].on_payload(inboxes[0].pop(0), t)
    _one(runs[1], inboxes[1], t)
    assert runs[0].remaining == 0 and runs[1].remaining == 0
    assert runs[0].stats.rounds == runs[1].stats.rounds == 3
    want = (data[0].astype(np.int64) + data[1]).astype(np.int32).reshape(-1, K)
    assert np.array_equal(runs[0].sums, want) and np.array_equal(runs[1].sums, want)
