"""Overload: a switch that answers later than the link-derived timers expect.

When the emulator's CPU, not a link, is the bottleneck, a switch serves frames one at a time
and every resend waits in the same queue as the frames it duplicates. Timers capped at a
link-derived RTO then fire on every round, the resends lengthen the queue, and the round
trips grow further: a collapse (128 workers at 1 Mb/s on 2 cores sent the switches 2.2
million frames where ~110k were needed). The agents back off as TCP does (hosts/rto.py
RtoEstimator.timed_out): the resends stay bounded by a small multiple of the window, however
late the answers, and the sums stay exact.

No wall clock: the agent's clock is a fake that only the transport's waits advance, and the
switch is the real software pipeline (agglab/testkit/fakenet.py PayloadSwitch) behind a
first-in first-out server of `service` seconds per frame.
"""

import numpy as np
import pytest

import agglab.hosts.slots as slots_module           # the per-slot timers read slots.time
from agglab.ground import wire
from agglab.hosts import native
from agglab.hosts.agent import allreduce
from agglab.hosts.rto import MAX_RTO, RtoEstimator
from agglab.testkit.fakenet import PayloadSwitch
from tests.test_hosts_agent import _FakeClock as _Clock   # time passes only by the agents' waits

K = wire.K
WINDOW = 16


class _SlowSwitch:
    """A one-worker switch whose CPU takes `service` seconds per frame, first come first served
    (resends and duplicates included), and answers each frame when it has served it."""

    def __init__(self, clock: _Clock, service: float):
        self.clock, self.service = clock, service
        self.switch, self.free_at, self.due, self.frames = PayloadSwitch(1), 0.0, [], 0

    def send(self, payload):
        self.frames += 1
        self.free_at = max(self.clock.now, self.free_at) + self.service
        self.due += [(self.free_at, res) for _, res in self.switch.process(0, bytes(payload))]

    def recv(self, timeout):
        if self.due and self.due[0][0] <= self.clock.now + timeout:
            self.clock.now = max(self.clock.now, self.due[0][0])
            return self.due.pop(0)[1]
        self.clock.now += max(timeout, 1e-4)
        return None


def _run(monkeypatch, service: float, *, sparse: bool = False, c_path: bool = False):
    monkeypatch.setenv("AGGLAB_NATIVE", "1" if c_path else "0")
    clock = _Clock()
    monkeypatch.setattr(slots_module, "time", clock)
    switch = _SlowSwitch(clock, service)
    x = np.arange(8 * WINDOW * K, dtype=np.int32)          # 8 rounds of the whole window
    if sparse:
        x[::3 * K] = 0                                        # some all-zero blocks as well
    out, stats = allreduce(x, transport=switch, rank=0, workers=1, window=WINDOW, give_up=60,
                           return_stats=True, sparse=sparse)
    assert np.array_equal(out, x)                           # one worker: the sum is its array
    return stats, switch


KINDS = [pytest.param({}, id="dense-python"),
         pytest.param({"c_path": True}, id="dense-c",
                      marks=pytest.mark.skipif(not native.AVAILABLE, reason="C fast path not built")),
         pytest.param({"sparse": True}, id="sparse")]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("service", [0.05, 0.2])
def test_late_answers_keep_resends_bounded(monkeypatch, kind, service):
    """A window's round trip is 16 x `service`: 0.8 s and 3.2 s, both past the 0.3 s cap of
    the estimate. Without backoff every slot resent every 0.3 s and each resend queued behind
    the others (at 0.8 s: over 16,000 resends, and the worker gave up); with it, a few per slot."""
    stats, switch = _run(monkeypatch, service, **kind)
    assert stats.retransmissions <= 4 * WINDOW, stats
    assert stats.rto_backoffs >= 1, stats                  # the timers did adapt
    # the switch served little more than the frames of the same sum from a switch that keeps up
    quick, unloaded = _run(monkeypatch, 0.0, **kind)
    assert quick.retransmissions == 0
    assert switch.frames <= unloaded.frames + 4 * WINDOW, (switch.frames, unloaded.frames)


def test_resends_do_not_grow_with_the_delay(monkeypatch):
    """Four times later answers cost at most a window more resends (a doubling of the timer
    or two), not four times as many."""
    near, _ = _run(monkeypatch, 0.05)
    far, _ = _run(monkeypatch, 0.2)
    assert far.retransmissions <= near.retransmissions + WINDOW, (near, far)


def test_timeouts_back_off_only_while_answers_come_late():
    """Random loss is not overload: timeouts while the round trips are short on the whole
    (a straggler's recovery makes single samples long) leave the RTO alone, so loss recovery
    keeps its pace. Once the smoothed round trip outlasts the capped estimate they double it,
    and answers on time step it back down, one halving per receive batch."""
    r = RtoEstimator(0.02)
    r.sample(0.01, now=0.0)                                 # SRTT 10 ms, RTTVAR 5 ms: RTO 30 ms
    assert r.rto == pytest.approx(0.03)
    r.sample(1.0, now=0.5)                                  # one answer waited for a straggler's recovery
    for t in (1.0, 2.0, 3.0):
        r.timed_out(t)
    assert (r.level, r.rto) == (0, MAX_RTO)
    for k in range(8):                                      # answers 1 s late, round after round
        r.sample(1.0, now=4.0 + 0.1 * k)
    assert r.srtt > MAX_RTO and r.rto == MAX_RTO
    r.timed_out(5.0)                                        # backed off: at least the measured SRTT + 4 RTTVAR
    assert (r.level, r.rto) == (1, pytest.approx(r.srtt + 4 * r.rttvar)) and r.rto > 2 * MAX_RTO
    r.timed_out(5.0 + r.rto / 2)                            # within that RTO: the same timeout
    assert r.backoffs == 1
    r.timed_out(5.0 + r.rto)
    assert r.level == 2 and r.backoffs == 2
    r.sample_many([0.01] * 8, now=9.0)                      # on time again: SRTT back under the cap
    assert r.level == 1
    r.sample(0.01, now=9.1)
    assert (r.level, r.rto) == (0, r.base)


def test_a_late_answer_keeps_the_backoff_up_to_the_ceiling():
    """A clean sample beyond the capped estimate (the CPU, not the link, is slow) keeps the
    backoff, and the RTO follows the measured round trips (SRTT + 4 RTTVAR) past the cap;
    repeated timeouts double it only up to the ceiling (a third of the run's give-up time)."""
    r = RtoEstimator(0.02, ceiling=3.0)
    for i in range(20):
        r.timed_out(10.0 * i)
    assert r.rto == 3.0 and r.backoffs == 8                 # 20 ms x 2^7 = 2.56 s, then the ceiling
    r.sample(2.0, now=300.0)                                # 2 s > the 0.3 s cap: still overloaded
    assert r.base == MAX_RTO and r.level == 8 and r.rto == 3.0
    r = RtoEstimator(0.02, ceiling=30.0)
    r.sample(2.0, now=0.0)
    r.timed_out(1.0)
    assert r.rto == pytest.approx(2.0 + 4 * 1.0)            # the measured estimate, not 2 x the cap


class _SlowPs:
    """ATP's parameter server, slow: a FIFO of `service` seconds per frame that echoes each
    block (one worker: the sum is its own values), marks an answer to a resent block RETX
    (as the PS does) and acknowledges FIN at once. Stands in for the worker's socket: `send`,
    `drain` and `readable` are the endpoint's _send, _drain and fdwait.readable."""

    def __init__(self, clock: _Clock, service: float, job: int):
        self.clock, self.service, self.job = clock, service, job
        self.free_at, self.due, self.seen, self.frames = 0.0, [], set(), 0

    def send(self, b, gen, values, senders, flags, dest):
        from agglab.hosts.protocol import encode
        from agglab.hosts.schemes import atp
        seq = gen << atp.SEQ_BITS | b
        again = atp.RETX if seq in self.seen else 0
        self.seen.add(seq)
        self.frames += 1
        at = self.clock.now if b == atp.FIN_BLOCK else max(self.clock.now, self.free_at) + self.service
        self.free_at = max(self.free_at, at)
        self.due.append((at, encode({"job": self.job, "flags": atp.FLAG_ATP | atp.RESULT | again,
                                     "block": seq}, values)))
        self.due.sort(key=lambda d: d[0])

    def readable(self, socks, timeout):
        if self.due and self.due[0][0] <= self.clock.now + timeout:
            self.clock.now = max(self.clock.now, self.due[0][0])
            return socks
        self.clock.now += max(timeout, 1e-4)
        return []

    def drain(self):
        while self.due and self.due[0][0] <= self.clock.now:
            yield self.due.pop(0)[1]


def _atp_run(monkeypatch, service):
    from agglab.hosts.schemes import atp
    clock = _Clock()
    monkeypatch.setattr(atp, "time", clock)
    ps = _SlowPs(clock, service, job=3)
    monkeypatch.setattr(atp, "fdwait", ps)
    worker = atp.AtpEndpoint("127.0.0.1", ["127.0.0.2", "127.0.0.1"], 1, job=3)   # its socket stays unused
    try:
        worker._send, worker._drain = ps.send, ps.drain
        rows = np.arange(8 * WINDOW * K, dtype=np.int32).reshape(-1, K)
        out, stats = worker.work(rows, WINDOW, give_up=60)
    finally:
        worker.sock.close()
    assert np.array_equal(out, rows)
    return stats, ps


@pytest.mark.parametrize("service", [0.05, 0.2])
def test_atp_late_answers_keep_resends_bounded(monkeypatch, service):
    """ATP's worker, same estimator: a PS that answers a window 16 x `service` late (its
    delay-based window shrinks too). Without the backoff: 467 resends at 0.05 s a frame, and
    at 0.2 s no progress for a minute; with it, about three windows' worth before the first
    answers tell the timers how late they come (its first RTO is 50 ms), then a few more
    (88 at 0.2 s a frame)."""
    stats, ps = _atp_run(monkeypatch, service)
    assert stats["retransmissions"] <= 6 * WINDOW, stats
    assert stats["rto_backoffs"] >= 1, stats
    quick, unloaded = _atp_run(monkeypatch, 0.0)
    assert quick["retransmissions"] == 0
    assert ps.frames <= unloaded.frames + 6 * WINDOW, (ps.frames, unloaded.frames)
