"""agglab calibrate's search, with a machine faked by its probe function (no network)."""

from __future__ import annotations

import random

import pytest

from agglab import calibrate as cal


def machine(ceiling: float, noise: float = 0.0, seed: int = 0):
    """A probe of a machine faithful up to `ceiling` Mb/s; with `noise`, a probe within
    that fraction of the ceiling comes out either way at random (a busy moment)."""
    rng = random.Random(seed)
    seen = []

    def probe(rate):
        seen.append(rate)
        near = abs(rate / ceiling - 1) <= noise
        return {"rate_mbps": rate, "faithful": rng.random() < 0.5 if near else rate <= ceiling}
    return probe, seen


def test_ladder_is_the_same_in_every_run():
    """start 2 Mb/s, four steps per doubling: 2, 2.38, 2.83, 3.36, 4, ... (3 digits)."""
    assert [cal.ladder(2.0, k) for k in range(6)] == [2.0, 2.38, 2.83, 3.36, 4.0, 4.76]


def test_search_steps_up_by_doublings_then_bisects_to_one_step():
    """Faithful up to 13 Mb/s: 2, 4, 8 faithful, 16 not; bisection on the ladder between 8
    (k=8) and 16 (k=12): 11.3 (k=10) faithful, then 13.5 (k=11) not -> 11.3 Mb/s, one
    step (x1.19) below the first unfaithful rung."""
    probe, seen = machine(13.0)
    r = cal.calibrate(repeats=1, probe_fn=probe, log=None)
    assert seen == [2.0, 4.0, 8.0, 16.0, 11.3, 13.5]
    assert r["ceiling_mbps"] == 11.3 and "first unfaithful rate: 13.5" in r["note"]
    assert r["wakeup_latency"]["samples"] > 0


def test_a_rung_needs_a_majority_of_its_probes():
    """repeats 3: two agreeing probes decide a rung; a split takes the third."""
    answers = iter([True, False, True, False, False])

    def probe(rate):
        return {"rate_mbps": rate, "faithful": next(answers)}
    ok, probes = cal.verdict(5.0, 3, probe)
    assert ok and len(probes) == 3
    ok, probes = cal.verdict(5.0, 3, probe)
    assert not ok and len(probes) == 2


@pytest.mark.parametrize("seed", range(5))
def test_noisy_machines_calibrate_within_one_step(seed):
    """A probe within 12% of the 13 Mb/s ceiling is a coin toss; three calibrations of the
    machine (different tosses) land on rungs at most one step apart."""
    results = []
    for run in range(3):
        probe, _ = machine(13.0, noise=0.12, seed=seed * 10 + run)
        results.append(cal.calibrate(repeats=3, probe_fn=probe, log=None)["ceiling_mbps"])
    rungs = sorted({round(4 * __import__("math").log2(r / 2.0)) for r in results})
    assert rungs[-1] - rungs[0] <= 1, results
