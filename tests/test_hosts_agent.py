"""The worker protocol (windows, versions, duplicates, loss, consistency check, give-up, timers)
against the software switch's Pipeline in-process (agglab/testkit/fakenet.py), not a second
hand-written model of the switch; a switch that misbehaves on purpose (silent, echoing late
copies and junk) is a transport of the test's own.
"""


import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from agglab.ground import wire
from agglab.testkit.fakenet import FakeNet, PayloadSwitch, _get
import agglab.hosts.slots as slots_module           # the per-slot timers read slots.time
from agglab.hosts import quantization as qz
from agglab.hosts.agent import (AllreduceTimeout, DtypeMismatchError, LengthMismatchError,
                         WindowMismatchError, WorkerCountMismatchError, allreduce)
from agglab.hosts.consistency import check_lead, lead_lanes
from agglab.hosts.protocol import encode

K = wire.K


def ints(n, length, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.integers(-2**31, 2**31 - 1, length, dtype=np.int32) for _ in range(n)]


def ok(results):
    for r in results:
        if isinstance(r, BaseException):
            raise r
    return results


@pytest.mark.parametrize("n,length", [(1, 5), (2, 1000), (4, K * 7 + 5), (8, 3000), (3, K), (2, 0)])
def test_int32_exact_wraparound(n, length):
    arrays = ints(n, length, seed=n)
    expected = np.sum(arrays, axis=0, dtype=np.int32)        # numpy wraps like the switch
    for out, stats in ok(FakeNet(n).run(arrays, give_up=10)):
        assert out.dtype == np.int32 and out.shape == (length,)
        assert np.array_equal(out, expected)
        assert stats.blocks == -(-length // K)
        assert stats.packets_sent - stats.retransmissions == stats.results_accepted


def test_float32_within_bound_and_shape_kept():
    n, rng = 4, np.random.default_rng(7)
    arrays = [(rng.standard_normal((13, 37)) * 10.0 ** rng.integers(-3, 4, (13, 1))).astype(np.float32)
              for _ in range(n)]
    exact = np.sum([a.astype(np.float64) for a in arrays], axis=0)
    blocks = np.zeros(-(-exact.size // K) * K)
    peak = np.max([np.abs(a) for a in arrays], axis=0).reshape(-1)
    blocks[:peak.size] = peak
    bound = np.repeat([qz.error_bound(qz.block_exponent(b), n) for b in blocks.reshape(-1, K)], K)
    for out, _ in ok(FakeNet(n).run(arrays, window=5)):
        assert out.dtype == np.float32 and out.shape == (13, 37)
        err = np.abs(out.astype(np.float64) - exact).reshape(-1)
        assert np.all(err <= bound[:err.size])


def test_loss_recovered_exactly():
    n, arrays = 4, ints(4, 4000, seed=3)
    net = FakeNet(n, loss=0.05, seed=11)
    results = ok(net.run(arrays, window=16, timeout=0.005))
    for out, stats in results:
        assert np.array_equal(out, np.sum(arrays, axis=0, dtype=np.int32))
    assert sum(s.retransmissions for _, s in results) > 0
    assert net.payloads.stat("DUP_REPLY") + net.payloads.stat("DUP_DROP") > 0


def test_window_smaller_than_job_and_successive_calls_continue_versions():
    """window 2 over 4 blocks: slot 0 ends on version 0, so a second call that restarted at
    version 0 would get the switch's stale first result back instead of a new sum."""
    n, net = 3, FakeNet(3)
    for call in range(3):
        arrays = ints(n, 4 * K, seed=call)
        for out, stats in ok(net.run(arrays, window=2)):
            assert stats.slots == 2 and stats.blocks == 4
            assert np.array_equal(out, np.sum(arrays, axis=0, dtype=np.int32)), f"call {call}"


def test_mismatched_lengths_raise_on_every_worker():
    arrays = ints(4, 1000)
    arrays[2] = arrays[2][:990]
    results = FakeNet(4).run(arrays, give_up=5)
    assert all(isinstance(r, LengthMismatchError) for r in results), results
    assert "length 990" in str(results[2]) and "mean length 997.5" in str(results[2])


def test_mismatched_dtype_window_and_worker_count():
    arrays = ints(2, 10 * K)            # 10 blocks: both windows (4 and 8) fit, so they differ
    mixed = [arrays[0], arrays[1].astype(np.float32)]
    res = FakeNet(2).run(mixed, give_up=5)
    assert all(isinstance(r, DtypeMismatchError) for r in res), res
    assert "int32" in str(res[0]) and "float32" in str(res[0])
    res = FakeNet(2).run(arrays, give_up=5, per_rank=[{"window": 4}, {"window": 8}])
    assert all(isinstance(r, WindowMismatchError) for r in res), res
    # the switch aggregates 2 workers but the agents believe there are 3
    res = FakeNet(2).run(arrays, give_up=5, per_rank=[{"workers": 3}, {"workers": 3}])
    assert all(isinstance(r, WorkerCountMismatchError) for r in res), res
    assert "aggregated 2 contributions but workers=3" in str(res[0])


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 2**40), min_size=1, max_size=wire.MAX_RANKS), st.integers(1, 1024))
def test_consistency_check_raises_iff_lengths_differ(lengths, window):
    n = len(lengths)
    total = np.sum([lead_lanes(length=L, window=window, dtype=np.int32) for L in lengths],
                   axis=0, dtype=np.int32)
    if len(set(lengths)) == 1:
        check_lead(total, n=n, rank=0, length=lengths[0], window=window, dtype=np.int32)
    else:
        with pytest.raises(LengthMismatchError, match=f"rank 0: length {lengths[0]} differs from the other workers'"):
            check_lead(total, n=n, rank=0, length=lengths[0], window=window, dtype=np.int32)
    with pytest.raises(WorkerCountMismatchError, match=f"aggregated {n} contributions but workers={n + 1};"):
        check_lead(total, n=n + 1, rank=0, length=lengths[0], window=window, dtype=np.int32)


def test_muted_worker_times_out_naming_missing_slots():
    """Worker 1 never hears back: it cannot advance, so worker 0 stalls after the first
    round (int32: slot 0's lead, and blocks 1-3, which slots 1-3 send at once)."""
    arrays = ints(2, 10 * K)
    results = FakeNet(2, mute=(1,)).run(arrays, window=4, give_up=0.5, join_timeout=60)
    assert all(isinstance(r, AllreduceTimeout) for r in results), results
    muted, other = str(results[1]), str(results[0])
    assert "4 of 4 slots unfinished" in muted and "slot 0 round 0 (lead" in muted
    assert "No result ever arrived" in muted and "retransmissions" in muted
    assert "slot 0 round 1 (block 0" in other and "slot 3 round 2 (block 7" in other
    assert "3/10 blocks done" in other
    assert "No result ever arrived" not in other


class _FakeClock:
    """agglab.hosts.agent's clock, advanced only by the transport's waits: timer behaviour becomes
    a deterministic sequence of events, whatever the load on the machine."""

    def __init__(self):
        self.now = 0.0

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


class _Silent:
    """A switch that never answers; each recv(timeout) lets `timeout` pass on the clock."""

    def __init__(self, clock: _FakeClock | None = None):
        self.clock, self.sent = clock or _FakeClock(), []

    def send(self, payload):
        self.sent.append((self.clock.now, _get(payload, "slot"), bool(_get(payload, "flags") & wire.FLAG_RETX)))

    def recv(self, timeout):
        self.clock.now += max(timeout, 1e-4)      # a real wait always lets some time pass
        return None


def test_silent_switch_gives_up_after_give_up_with_capped_backoff(monkeypatch):
    clock = _FakeClock()
    monkeypatch.setattr(slots_module, "time", clock)
    t = _Silent(clock)
    with pytest.raises(AllreduceTimeout, match=r"slot 2 round 0 \(lead, ver 0, tree 0, 0 retransmissions"):
        allreduce(np.zeros(5 * K, np.float32), transport=t, rank=0, workers=2, give_up=0.4)
    assert 0.4 < clock.now < 0.4 + 0.01              # gave up once give_up had passed, not later
    first, probes = t.sent[:5], t.sent[5:]
    assert first == [(0.0, s, False) for s in range(5)]     # every slot's lead packet at once
    # then only slot 0 probes (the lead of slot 0 carries the check lanes), backed off
    # 20, 40, 80 ms and capped at 4 x RTO (agglab.hosts.rto.backoff), until give_up: not 2 ms spam
    assert all(slot == 0 and retx for _, slot, retx in probes)
    gaps = np.diff([0.0] + [at for at, _, _ in probes])
    assert gaps == pytest.approx([0.02, 0.04, 0.08, 0.08, 0.08, 0.08], abs=1e-3)


@pytest.mark.parametrize("workers,polls", [(2, 80), (16, 80), (128, 10), (256, 8)])
def test_a_large_job_polls_the_controller_less_often(monkeypatch, workers, polls):
    """0.4 s of a silent switch: a worker of a small job reads the controller's file every
    5 ms, one of 128 every 40 ms (all of them together no more often than 16 would), one of
    256 every 50 ms (the longest interval)."""
    clock = _FakeClock()
    monkeypatch.setattr(slots_module, "time", clock)
    calls = []
    with pytest.raises(AllreduceTimeout, match="made no progress for 0.40 s; 5 of 5 slots unfinished"):
        allreduce(np.zeros(5 * K, np.int32), transport=_Silent(clock), rank=0, workers=workers, give_up=0.4,
                  control=lambda: calls.append(clock.now))
    assert abs(len(calls) - polls) <= 2, len(calls)
    assert np.diff(calls).min() >= slots_module.control_poll(workers) - 1e-9


class _SlowLink:
    """One worker behind a link of `mbps`: frames leave back to back (a FIFO at the link
    rate, as tc htb sends them), a one-worker switch answers each on arrival and the result
    is back `base` seconds later. recv lets the fake clock run to the next result or the
    timeout, whichever comes first."""

    def __init__(self, clock, mbps, base=0.001):
        self.clock, self.byte_time, self.base = clock, 8 / (mbps * 1e6), base
        self.switch, self.leaves_at, self.due = PayloadSwitch(1), 0.0, []

    def send(self, payload):
        self.leaves_at = max(self.clock.now, self.leaves_at) + (len(payload) + wire.AGG_OFFSET) * self.byte_time
        self.due += [(self.leaves_at + self.base, res) for _, res in self.switch.process(0, payload)]

    def recv(self, timeout):
        self.due.sort(key=lambda d: d[0])
        if self.due and self.due[0][0] <= self.clock.now + timeout:
            self.clock.now = max(self.clock.now, self.due[0][0])
            return self.due.pop(0)[1]
        self.clock.now += max(timeout, 1e-4)
        return None


@pytest.mark.parametrize("told", [False, True])
def test_timers_start_when_a_packet_leaves_a_slow_link(monkeypatch, told):
    """On a link that sends a frame every 0.5 ms (5 Mb/s at K=64) a window of 32 frames waits
    16 ms in the host's own queue. The first results come back after ~1 ms, and timing the
    rest from when they were queued fires their timers before they even left: spurious
    resends, behind the window itself.
    Told its link rate, the agent times each packet from when it leaves: no resend."""
    clock = _FakeClock()
    monkeypatch.setattr(slots_module, "time", clock)
    # a frame of 58 + 4K bytes (314 at K=64, 1,082 at K=256) every 500 us: bits / us = Mb/s
    mbps = (58 + 4 * K) * 8 / 500
    x = np.arange(200 * K, dtype=np.int32)
    out, stats = allreduce(x, transport=_SlowLink(clock, mbps=mbps), rank=0, workers=1, window=32,
                           return_stats=True, link_mbps=mbps if told else None)
    assert np.array_equal(out, x)
    if told:
        assert stats.retransmissions == 0
        # and it coalesces: after a small batch it waits (a frame every 0.5 ms here) for more
        assert stats.batches < 0.6 * stats.results_accepted
    else:
        assert stats.retransmissions > 0
        assert stats.batches >= 0.9 * stats.results_accepted    # woken for (almost) every result


def test_on_a_1_mbps_link_an_agent_gathers_results_per_wake_up(monkeypatch):
    """At 1 Mb/s a result comes every 2.9 ms: a pause of 1 ms after a small batch gathered none
    (a wake-up per result, and one more for the pause). The agent waits up to a few frames'
    time while its own link still has that much queued: several results per wake-up, and no
    resend (the link stays busy, so the round trips do not outgrow the timers)."""
    clock = _FakeClock()
    monkeypatch.setattr(slots_module, "time", clock)
    x = np.arange(200 * K, dtype=np.int32)
    out, stats = allreduce(x, transport=_SlowLink(clock, mbps=1.0), rank=0, workers=1, window=32,
                           return_stats=True, link_mbps=1.0)
    assert np.array_equal(out, x)
    assert stats.retransmissions == 0
    assert stats.batches < 0.5 * stats.results_accepted


class _PacedSlowLink(_SlowLink):
    """A _SlowLink whose sender can be paced (as UdpTransport can): records the rates asked."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.paced = []

    def pace(self, mbps):
        self.paced.append(mbps)


@pytest.mark.parametrize("mbps", [5, None])
def test_an_agent_paces_a_transport_that_can_at_its_link_rate(monkeypatch, mbps):
    """Told its link rate, the agent has its transport pace onto it; untold, it switches
    pacing off (a transport reused across calls). Its departure clock then runs a little
    slower than the link (the pacer's share of it), never faster, so no timer fires early."""
    clock = _FakeClock()
    monkeypatch.setattr(slots_module, "time", clock)
    link = _PacedSlowLink(clock, mbps=5)
    x = np.arange(200 * K, dtype=np.int32)
    out, stats = allreduce(x, transport=link, rank=0, workers=1, window=32, return_stats=True,
                           link_mbps=mbps)
    assert np.array_equal(out, x)
    assert link.paced == [mbps]
    if mbps:
        assert stats.retransmissions == 0


class _Echo:
    """One-worker 'switch' that answers every packet, plus junk and a copy `delay` sends later.

    With window 1 and delay 2 the late copy of round r's result arrives while round r+2
    (same version) is outstanding: only the block number tells it apart.
    """

    def __init__(self, delay):
        self.switch, self.out, self.late, self.sent, self.delay = PayloadSwitch(1), [], [], 0, delay

    def send(self, payload):
        self.sent += 1
        self.out += [res for due, res in self.late if due == self.sent]
        for _, res in self.switch.process(0, payload):
            self.late.append((self.sent + self.delay, res))
            self.out += [b"short", encode({"job": 9, "flags": wire.FLAG_RESULT},
                                          np.zeros(K, np.int32)), res]

    def recv(self, timeout):
        return self.out.pop(0) if self.out else None


@pytest.mark.parametrize("delay", [1, 2, 3])
def test_duplicates_and_foreign_packets_are_ignored(delay):
    x = np.arange(1000, dtype=np.int32)
    out, stats = allreduce(x, transport=_Echo(delay), rank=0, workers=1, window=1,
                           return_stats=True)
    assert np.array_equal(out, x)
    # every result but the last `delay` ones is seen again, late
    assert stats.duplicates_ignored == stats.results_accepted - delay
    assert stats.foreign_ignored == 2 * stats.results_accepted


def test_rejects_bad_arguments():
    t = _Silent()
    with pytest.raises(TypeError, match="float64"):
        allreduce(np.zeros(3), transport=t, rank=0, workers=1)
    with pytest.raises(ValueError, match="rank"):
        allreduce(np.zeros(3, np.int32), transport=t, rank=2, workers=2)
    with pytest.raises(ValueError, match="window"):
        allreduce(np.zeros(3, np.int32), transport=t, rank=0, workers=1, window=wire.SLOTS + 1)
    with pytest.raises(ValueError, match="job"):
        allreduce(np.zeros(3, np.int32), transport=t, rank=0, workers=1, job=256)
    with pytest.raises(ValueError, match=f"workers <= {wire.MAX_RANKS} "):     # ranks beyond agg_h.worker
        allreduce(np.zeros(3, np.int32), transport=t, rank=0, workers=wire.MAX_RANKS + 1)


@settings(max_examples=25, deadline=None)
@given(st.integers(1, 6), st.integers(0, 40 * K), st.integers(1, 24), st.integers(0, 2**31))
def test_any_length_window_and_worker_count_is_exact(n, length, window, seed):
    arrays = ints(n, length, seed=seed)
    for out, stats in ok(FakeNet(n).run(arrays, window=window, give_up=10)):
        assert np.array_equal(out, np.sum(arrays, axis=0, dtype=np.int32))
        assert stats.slots == min(window, max(1, stats.blocks))


def test_float_zero_blocks_extremes_and_mixed_scales():
    """All-zero blocks (exponent 0 on the wire) must come back as exact zeros; a worker
    with zeros next to one with data, and huge/tiny magnitudes, stay within the bound."""
    x0 = np.zeros(6 * K, np.float32)
    x1 = np.zeros(6 * K, np.float32)
    x0[K:2 * K] = 1e-40                      # subnormal block
    x1[2 * K:3 * K] = 2.0**120               # huge block next to zeros
    x0[3 * K:4 * K], x1[3 * K:4 * K] = 1e-3, -7e4   # mixed scales inside one block
    x1[5 * K - 1] = 3.0                      # a single non-zero in the last block
    exact = x0.astype(np.float64) + x1
    for out, _ in ok(FakeNet(2).run([x0, x1], window=2)):
        assert np.all(out[:K] == 0) and np.all(out[4 * K:5 * K - 1] == 0)
        for b in range(6):
            peak = max(np.abs(x0[b * K:(b + 1) * K]).max(), np.abs(x1[b * K:(b + 1) * K]).max())
            e = qz.block_exponent(np.array([peak], np.float32))
            err = np.abs(out[b * K:(b + 1) * K].astype(np.float64) - exact[b * K:(b + 1) * K])
            assert err.max() <= qz.error_bound(e, 2), b


def _star(n: int, trees=(0,), epochs=(0,)):
    """A star's pipeline with agg_job entries for each of `trees` and `epochs` (one job)."""
    from agglab.softswitch.pipeline import Pipeline
    from agglab.softswitch.star import star_commands

    pipeline = Pipeline()
    first = star_commands(n, tree=trees[0], epoch=epochs[0])
    more = [c for t in trees for e in epochs if (t, e) != (trees[0], epochs[0])
            for c in star_commands(n, tree=t, epoch=e) if c.startswith("table_add agg_job ")]
    for cmd in first + more:
        pipeline.command(cmd)
    return pipeline


def test_tree_of_slot_and_progress():
    net = FakeNet(2, pipeline=_star(2, trees=(3, 1)))
    net.record = True
    progress = [[], []]
    arrays = ints(2, 10 * K)
    res = ok(net.run(arrays, window=4, per_rank=[
        {"tree_of_slot": [3, 1, 3, 1], "on_progress": lambda d, t: progress[0].append((d, t))},
        {"tree_of_slot": [3, 1, 3, 1], "on_progress": lambda d, t: progress[1].append((d, t))}]))
    assert all(np.array_equal(out, np.sum(arrays, axis=0, dtype=np.int32)) for out, _ in res)
    assert {(slot, tree) for _, slot, tree, _ in net.sent} == {(0, 3), (1, 1), (2, 3), (3, 1)}
    for calls in progress:                     # after each batch of results: rising, to the end
        assert calls[-1] == (10, 10) and all(total == 10 for _, total in calls)
        assert all(a < b for (a, _), (b, _) in zip(calls, calls[1:]))
    with pytest.raises(ValueError, match="tree_of_slot needs 4"):
        allreduce(arrays[0], transport=_Silent(), rank=0, workers=2, window=4, tree_of_slot=[1, 2])


def test_epoch_change_rebuilds_outstanding_packets():
    """Mid-run the 'switch' starts dropping epoch 0 (entries replaced by epoch 1) and the
    controller announces epoch 1: agents must resend everything outstanding with epoch 1,
    or they would stall and time out."""
    n, arrays = 3, ints(3, 40 * K, seed=4)
    net = FakeNet(n, pipeline=_star(n, epochs=(0, 1)))
    net.record = True

    def progress(done, total):
        if done >= 8:                   # (results come in batches: done may skip 8)
            net.accept_epoch = 1

    def control():
        return {"epoch": 1, "tree_of_slot": [0] * 4} if net.accept_epoch == 1 else None

    res = ok(net.run(arrays, window=4, give_up=2, control=control,
                     per_rank=[{"on_progress": progress}, {}, {}]))
    for out, stats in res:
        assert np.array_equal(out, np.sum(arrays, axis=0, dtype=np.int32))
        assert stats.epoch_changes == 1 and stats.retransmissions >= 1
    epochs = [e for _, _, _, e in net.sent]
    assert epochs[0] == 0 and epochs[-1] == 1 and epochs.count(1) > n * 4


def window_queue_mbps(seconds: float, slots: int) -> float:
    """The rate at which `slots` frames of this K's size take `seconds` to cross one link."""
    return slots * (wire.FRAME_BYTES * 8) / seconds / 1e6


class _SlowTreeLink(_SlowLink):
    """The slow link is on the tree, past the switch: each result waits for the ones before it
    on a FIFO at the link rate (the worker's own sends leave at once). On the fake clock."""

    frames = 0

    def send(self, payload):
        for _, res in self.switch.process(0, payload):
            self.frames += 1
            self.leaves_at = max(self.clock.now + self.base, self.leaves_at) + (len(res) + wire.AGG_OFFSET) * self.byte_time
            self.due.append((self.leaves_at, res))


def test_a_window_queued_at_a_slow_link_longer_than_the_rto_cap_needs_the_path_rate(monkeypatch):
    """16 results queued at a link where they take 0.75 s (2.5 x the 0.3 s cap): told the
    tree's rate, the timers wait for the queue (a handful of resends at most); not told,
    the slots time out while their results are still queued and the resends lengthen the
    queue, until the shared backoff (hosts/rto.py) catches up: about one window of them,
    not the storm they were before it."""
    from agglab.hosts.rto import MAX_RTO
    window = 16
    mbps = window_queue_mbps(2.5 * MAX_RTO, window)
    (x,) = ints(1, window * K * 3, seed=5)

    def run(data, **told):
        clock = _FakeClock()
        monkeypatch.setattr(slots_module, "time", clock)
        link = _SlowTreeLink(clock, mbps)
        try:
            return (*allreduce(data, transport=link, rank=0, workers=1, window=window, give_up=30,
                               return_stats=True, **told), link)
        except AllreduceTimeout:
            return None, None, link

    out, stats, _ = run(x, tree_mbps={"0": mbps})
    assert np.array_equal(out, x)
    assert stats.retransmissions <= 2
    one_round = x[:window * K]                         # the storm is slow: one round shows it
    _, _, told = run(one_round, tree_mbps={"0": mbps})
    _, blind_stats, blind = run(one_round)
    assert window // 2 <= blind_stats.retransmissions <= 2 * window
    # the spurious resends' answers are frames on the slow link: far more than the results
    assert blind.frames > told.frames + window // 2
