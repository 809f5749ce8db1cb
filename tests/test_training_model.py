"""The training bound (emulation/training_model.py, experiments/bounds.py training_bound):
a call limited by its bytes or its window's round trips, plus compute; and the round trip a
run records (each rank's least latency sample, the median over ranks). Expectations worked
by hand from the frame size (314 bytes), K = 64 and a 5 Mb/s link's 6,000-byte bucket."""

from __future__ import annotations

import pytest

from agglab.emulation import training_model as tm
from agglab.experiments.bounds import measured_rtt, training_bound
from agglab.ground.runspec import RunSpec
from agglab.hosts.checker import _median_ms
from agglab.hosts.iterations import run_iterations
from agglab.hosts.rto import RtoEstimator

# 4 workers on one switch, 64,000 int32 = 1,000 K-blocks + 1 lead frame (int32: slot 0 only)
STATIC = dict(workers=4, elements=64_000, bw=5.0, algorithm="switchml")
# each host link: 1,001 x 314 = 314,314 bytes, less the 6,000-byte bucket, at 5 Mb/s
STATIC_WIRE = (1001 * 314 - 6000) * 8 / 5e6          # 0.4933024 s
# ATP, PS colocated on rank 0: 800 blocks; the PS unicasts each result to 3 workers
ATP = dict(workers=4, elements=51_200, bw=5.0, algorithm="atp", window=8)
ATP_WIRE = (3 * 800 * 314 - 6000) * 8 / 5e6          # 1.19616 s


def test_a_short_window_takes_its_round_trips():
    spec = RunSpec(window=4, **STATIC)
    assert tm.worker_frames(spec) == 1001
    assert tm.call_seconds(spec, 0.010) == pytest.approx(1001 / 4 * 0.010)     # 2.5025 s > the wire's
    assert tm.call_seconds(spec, 0.001) == pytest.approx(STATIC_WIRE)         # 0.25 s of round trips < the wire's
    assert tm.call_seconds(spec, None) == pytest.approx(STATIC_WIRE)          # no round trip known: bytes only


def test_a_static_partition_caps_the_window_at_its_share_of_the_pool():
    # a pool of 8 split among 4 jobs: 2 slots each, so 2 frames per round trip
    spec = RunSpec(topology="fattree", k=4, jobs=4, placement="packed", atp_pool_slots=8, **STATIC).validate()
    assert tm.call_seconds(spec, 0.010) == pytest.approx(1001 / 2 * 0.010)    # 5.005 s


def test_atp_sends_one_frame_per_block_and_its_window_is_not_the_pool():
    spec = RunSpec(atp_pool_slots=4, **ATP).validate()
    assert tm.worker_frames(spec) == 800
    assert tm.call_seconds(spec, None) == pytest.approx(ATP_WIRE)
    assert tm.call_seconds(spec, 0.050) == pytest.approx(800 / 8 * 0.050)     # 5.0 s, window 8 with a pool of 4


def test_training_adds_each_iterations_compute():
    spec = RunSpec(window=4, iterations=3, compute_ms=100.0, job_offsets=[5.0], jobs=1, **STATIC)
    assert tm.training_seconds(spec, 0.010) == pytest.approx(3 * (0.1 + 2.5025))   # 7.8075 s; no offset


def test_the_bound_is_the_ratio_of_training_times_at_each_points_own_round_trip():
    static = RunSpec(window=4, iterations=3, compute_ms=100.0, **STATIC)
    atp = RunSpec(iterations=3, compute_ms=100.0, **ATP)
    static_rows = [{"ok": True, "jobs": [{"rtt_min_ms": 10.0}, {"rtt_min_ms": 12.0}, {"rtt_min_ms": 8.0}]}]
    atp_rows = [{"ok": True, "jobs": [{"rtt_min_ms": 50.0}, {"rtt_min_ms": None}]},
                {"ok": False, "jobs": [{"rtt_min_ms": 1.0}]}]               # a failed run's is not used
    assert measured_rtt(static_rows) == pytest.approx(0.010)
    assert measured_rtt(atp_rows) == pytest.approx(0.050)
    assert measured_rtt([{"ok": True, "jobs": [{}]}]) is None
    assert measured_rtt([{"ok": True, "jobs": [{"rtt_min_ms": -13.6}, {"rtt_min_ms": 0.0}]}]) is None
    # static 3 x (0.1 + 2.5025) = 7.8075 s; ATP 3 x (0.1 + max(1.196, 5.0)) = 15.3 s
    assert training_bound([static], static_rows, [atp], atp_rows) == pytest.approx(7.8075 / 15.3)


def test_the_estimator_keeps_its_least_sample():
    rto = RtoEstimator(0.2)
    assert rto.least is None
    rto.sample(0.020, 1.0)
    rto.sample_many([0.030, 0.005, 0.040], 2.0)
    rto.sample(0.010, 3.0)
    assert rto.least == 0.005


def test_a_jobs_round_trip_is_the_median_of_its_ranks_least_samples():
    assert _median_ms([0.004, None, 0.002, 0.010]) == 4.0        # a PS with no samples is left out
    assert _median_ms([0.004, 0.002, 0.010, 0.006]) == 5.0
    assert _median_ms([None]) is None


def test_training_keeps_the_least_round_trip_of_every_call():
    spec = RunSpec(iterations=3, compute_ms=1.0)
    samples = iter([0.004, 0.003, 0.005])
    now = [0.0]

    def call():
        now[0] += 0.01
        return "sum", {"packets_sent": 1, "retransmissions": 0, "rtt_min": next(samples)}

    def sleep(s):
        now[0] += s

    _, stats = run_iterations(call, spec, tenant=0, sleep=sleep, clock=lambda: now[0])
    assert stats["rtt_min"] == 0.003
