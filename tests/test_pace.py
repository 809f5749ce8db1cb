"""PACE and the iteration model, checked against hand computations and brute force."""

from __future__ import annotations

import json
import random

import pytest

from agglab.pace import architectures
from agglab.pace.fusion import CostModel, all_partitions, fuse, makespan
from agglab.pace.schedule import LayerProfile, Profile, load_profile, profile_names, simulate
from agglab.pace.timeline import plot, write_trace

# Three layers, forward 1 ms and backward 2 ms each; gradients of 1000, 4000 and 1000 bytes.
# Forward 0-3; backward L3 3-5, L2 5-7, L1 7-9: releases L3 at 5, L2 at 7, L1 at 9.
THREE = Profile("three", [LayerProfile("L1", 250, 1.0, 2.0), LayerProfile("L2", 1000, 1.0, 2.0),
                          LayerProfile("L3", 250, 1.0, 2.0)])
COST = CostModel(alpha_ms=0.25, beta_ms_per_byte=1e-3)      # 1000 bytes: 1.25 ms, 4000: 4.25 ms


def test_fifo_critical_path_by_hand():
    # Cycle 1 ms, no fusion (threshold 1000 B). Cycles start at 1, 2, ... 5: L3 5-6.25; the
    # cycle after it starts at 6.25 (it overran), the next at 7.25: L2 7.25-11.5; the next
    # cycle starts when that ends, 11.5: L1 11.5-12.75.
    # Next forward: L1 max(9, 12.75)=12.75-13.75, L2 -14.75, L3 -15.75 -> 15.75 - 3 = 12.75.
    it = simulate(THREE, "fifo", COST, threshold=1000, cycle_ms=1.0)
    assert [(t.label, t.start, t.end) for t in it.transfers] == [
        ("L3", 5.0, 6.25), ("L2", 7.25, 11.5), ("L1", 11.5, 12.75)]
    assert it.iteration_ms == pytest.approx(12.75)
    assert it.compute[-3:] == [("fwd' L1", 12.75, 13.75), ("fwd' L2", 13.75, 14.75), ("fwd' L3", 14.75, 15.75)]


def test_pace_order_and_preemption_by_hand():
    # Chunks of 1000 B: L2 is 4 chunks of 1.25 ms. L3 5-6.25; L2[1] 7-8.25, L2[2] 8.25-9.5;
    # L1 was released at 9, so at 9.5 it preempts L2: 9.5-10.75; then L2[3], L2[4] to 13.25.
    # Next forward: L1 10.75-11.75, L2 waits for 13.25: 13.25-14.25, L3 14.25-15.25 -> 12.25.
    it = simulate(THREE, "pace", COST, partition=1000)
    assert [(t.label, t.start, t.end) for t in it.transfers] == [
        ("L3", 5.0, 6.25), ("L2[1/4]", 7.0, 8.25), ("L2[2/4]", 8.25, 9.5), ("L1", 9.5, 10.75),
        ("L2[3/4]", 10.75, 12.0), ("L2[4/4]", 12.0, 13.25)]
    assert it.preemptions == [(9.5, "L2[3/4]", "L1")]
    assert it.iteration_ms == pytest.approx(12.25)


def test_free_communication_gives_forward_plus_backward():
    it = simulate(THREE, "pace", CostModel(0.0, 0.0))
    assert it.iteration_ms == pytest.approx(9.0)     # F 3 + B 6: nothing to wait for


def test_pace_fuses_small_tensors_released_together():
    tiny = Profile("tiny", [LayerProfile(f"t{i}", 10, 0.0, 0.001) for i in range(4)])
    it = simulate(tiny, "pace", CostModel(1.0, 1e-6), partition=1000)
    assert [t.label for t in it.transfers] == ["t3+t2+t1+t0"]      # one start-up instead of four


@pytest.mark.parametrize("seed", range(40))
def test_fusion_dp_equals_brute_force(seed):
    rng = random.Random(seed)
    n = rng.randint(1, 8)
    sizes = [rng.choice([1, 5, 20, 100, 400]) for _ in range(n)]
    releases = sorted(rng.uniform(0, 10) for _ in range(n))
    cost = CostModel(rng.uniform(0, 3), rng.uniform(0.001, 0.05))
    limit = rng.choice([50, 200, 10_000])
    allowed = [p for p in all_partitions(n) if all(j - i == 1 or sum(sizes[i:j]) <= limit for i, j in p)]
    best = min(makespan(p, sizes, releases, cost) for p in allowed)
    groups = fuse(sizes, releases, cost, limit)
    assert groups in allowed
    assert makespan(groups, sizes, releases, cost) == pytest.approx(best)


def test_all_partitions_counts():
    assert len(list(all_partitions(5))) == 16
    assert [[(0, 1), (1, 2)], [(0, 2)]] == sorted(all_partitions(2), key=len, reverse=True)


@pytest.mark.parametrize("model", sorted(architectures.MODELS))
def test_profiles_match_the_published_parameter_counts(model):
    build, _, published, _ = architectures.MODELS[model]
    assert sum(x.params for x in build()) == published
    prof = load_profile(model)
    assert [x.params for x in prof.layers] == [x.params for x in build()]   # the YAML is up to date
    assert all(x.backward_ms == pytest.approx(2 * x.forward_ms, abs=1e-5) for x in prof.layers)


def test_unknown_profile_is_one_clear_error():
    with pytest.raises(ValueError, match="no profile 'alexnet'"):
        load_profile("alexnet")
    assert {"resnet50", "vgg16", "bert-base"} <= set(profile_names())


def test_timeline_outputs(tmp_path):
    runs = {s: [simulate(THREE, s, COST, threshold=1000, cycle_ms=1.0, partition=1000)] for s in ("fifo", "pace")}
    trace = json.loads(write_trace(runs, tmp_path / "t.json").read_text())
    spans = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    assert len(spans) == 2 * 9 + 3 + 6                    # 9 compute spans per run, 3 + 6 transfers
    assert all({"name", "ph", "ts", "dur", "pid", "tid"} <= set(e) for e in spans)
    l1 = next(e for e in spans if e["pid"] == 2 and e["name"] == "L1")
    assert (l1["ts"], l1["dur"]) == (9500.0, 1250.0)          # microseconds
    png = plot(runs, tmp_path / "t.png", "three layers")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_replay_puts_measured_times_into_the_planned_order():
    from agglab.pace.schedule import replay

    planned = simulate(THREE, "pace", COST, partition=1000).transfers
    # Measured: L3 2 ms, every other transfer 1 ms. L3 5-7; L2[1] 7-8, L2[2] 8-9; L1 (ready 9)
    # 9-10; L2[3] 10-11, L2[4] 11-12. Forward: L1 10-11, L2 waits to 12: 12-13, L3 13-14 -> 11.
    it = replay(THREE, "pace", planned, [2, 1, 1, 1, 1, 1])
    assert [(t.start, t.end) for t in it.transfers] == [(5, 7), (7, 8), (8, 9), (9, 10), (10, 11), (11, 12)]
    assert it.iteration_ms == pytest.approx(11.0)


def test_scale_arithmetic():
    from agglab.ground.scale import Scale

    sc = Scale.of(link_gbps=10, bw_mbps=5, total_bytes=100 * 2**20, emulated_mb=4)
    assert (sc.rate, sc.size, sc.dilation) == (2000.0, 25.0, 80.0)
    # 4 MB really: 3.36 ms at 10 Gb/s; 4/25 MB emulated at 5 Mb/s: 268 ms = 80 x 3.36 ms
    assert 4 * 2**20 / sc.size * 8 / 5e6 == pytest.approx(80 * 4 * 2**20 * 8 / 10e9)
    assert Scale.of(10, 5, 2**20, 4).size == 1.0          # never inflate a small model


def test_cost_model_fit_through_calls():
    """Calls of 1,000 B in 3 ms and 3,000 B in 7 ms: beta = 4 ms / 2,000 B = 0.002 ms/B,
    alpha = 3 - 0.002 x 1,000 = 1 ms. One size only: beta must be given (0.002), alpha is
    the mean excess: (3.2 - 2 + 2.8 - 2) / 2 = 1 ms."""
    from agglab.pace.fusion import CostModel

    fit = CostModel.fit([1000, 3000, 1000, 3000], [3, 7, 3, 7])
    assert fit.alpha_ms == pytest.approx(1.0) and fit.beta_ms_per_byte == pytest.approx(0.002)
    one = CostModel.fit([1000, 1000], [3.2, 2.8], beta_ms_per_byte=0.002)
    assert one.alpha_ms == pytest.approx(1.0) and one.beta_ms_per_byte == 0.002
    with pytest.raises(ValueError, match="calls of one size: give the per-byte cost"):
        CostModel.fit([1000, 1000], [3.2, 2.8])
