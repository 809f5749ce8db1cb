"""`agglab calibrate`'s search, against a fake machine: no network, no clock.

Why a fake measurement: the search (step up the ladder by `factor`, then bisect on it between
the last faithful and the first unfaithful rung, each rung decided by a majority of probes) is
what decides the ceiling the experiments run at;
on a real machine its outcome depends on the load, so here each probe's allreduce is answered
by a model machine whose true ceiling the test knows, and the test checks which rates were
probed, the ceiling found and what was stored.
"""

from __future__ import annotations

import io
import json
import math
import random

import pytest

from agglab import calibrate as cal
from emulation import fidelity


class FakeMachine:
    """run_allreduce as a machine that is faithful up to `ceiling` Mb/s (and, optionally,
    unfaithful below `floor`, as very slow links were when a window outlasted the timers)."""

    def __init__(self, ceiling: float, floor: float = 0.0):
        self.ceiling, self.floor, self.rates = ceiling, floor, []

    def run_allreduce(self, workers, elements, bw, window=None, **_):
        self.rates.append(bw)
        ideal = fidelity.switchml_wire_seconds(elements, bw)
        good = self.floor <= bw <= self.ceiling
        return {"ok": True, "seconds": ideal * (1.03 if good else 1.6), "retransmissions": 0,
                "fidelity": {"link_bound": good, "reason": "model"}}


@pytest.fixture
def machine(monkeypatch, tmp_path):
    import emulation.session

    def make(ceiling, floor=0.0):
        m = FakeMachine(ceiling, floor)
        monkeypatch.setattr(emulation.session, "run_allreduce", m.run_allreduce)
        return m
    monkeypatch.setenv("AGGLAB_CALIBRATION", str(tmp_path / "calibration.json"))
    return make


def test_steps_up_then_bisects_to_the_ceiling(machine, tmp_path):
    m = machine(ceiling=13.0)
    record = cal.calibrate(workers=4, start=2, factor=2, limit=200, refine=2, log=io.StringIO(), repeats=1)
    # the ladder 2 x 2^(k/4): 2, 4, 8 faithful, 16 not; then k=10 (11.3) faithful, k=11 (13.5) not
    assert m.rates == [2, 4, 8, 16, 11.3, 13.5]
    assert record["ceiling_mbps"] == 11.3 and record["note"] == "first unfaithful rate: 13.5 Mb/s"
    assert [p["faithful"] for p in record["probes"]] == [True, True, True, False, True, False]
    stored = json.loads((tmp_path / "calibration.json").read_text())
    assert stored["ceiling_mbps"] == 11.3 and stored["workers"] == 4 and len(stored["probes"]) == 6
    assert stored["wakeup_latency"]["samples"] > 0


def test_each_rung_is_decided_by_a_majority(machine):
    """repeats 3 on a steady machine: two agreeing probes per rung, the same ceiling."""
    m = machine(ceiling=13.0)
    record = cal.calibrate(workers=4, start=2, factor=2, limit=200, refine=2, log=io.StringIO())
    assert m.rates == [2, 2, 4, 4, 8, 8, 16, 16, 11.3, 11.3, 13.5, 13.5]
    assert record["ceiling_mbps"] == 11.3


def test_a_slow_link_below_the_floor_does_not_stop_the_climb(machine):
    m = machine(ceiling=9.0, floor=3.0)
    record = cal.calibrate(workers=4, start=2, factor=2, limit=200, refine=1, log=io.StringIO(), repeats=1)
    assert m.rates == [2, 4, 8, 16, 11.3]            # 2 unfaithful, kept climbing; bisect once
    assert record["ceiling_mbps"] == 8


def test_faithful_up_to_the_limit(machine):
    m = machine(ceiling=1000.0)
    record = cal.calibrate(workers=2, start=5, factor=2, limit=20, refine=2, log=io.StringIO(), repeats=1)
    assert m.rates == [5, 10, 20] and record["ceiling_mbps"] == 20
    assert "search limit" in record["note"]


def test_nothing_faithful_stores_nothing(machine, tmp_path):
    m = machine(ceiling=0.5)
    record = cal.calibrate(workers=2, start=2, factor=2, limit=200, refine=2, log=io.StringIO(), repeats=1)
    assert m.rates == [2, 4, 8]                      # three unfaithful rates in a row: stop
    assert record["ceiling_mbps"] is None and "unknown" in record["note"]
    assert not (tmp_path / "calibration.json").exists()


def test_a_probe_is_faithful_only_within_tolerance_and_link_bound(machine):
    machine(ceiling=100.0)
    p = cal.probe(10.0, workers=2, seconds=1.0, tolerance=0.01, log=io.StringIO())
    assert p["faithful"] is False                    # 3% over the analytic time, 1% allowed
    p = cal.probe(10.0, workers=2, seconds=1.0, tolerance=0.05, log=io.StringIO())
    assert p["faithful"] is True and p["elements"] == cal.elements_for(10.0, 1.0)


def test_ladder_is_the_same_in_every_run():
    """start 2 Mb/s, four steps per doubling: 2, 2.38, 2.83, 3.36, 4, ... (3 digits)."""
    assert [cal.ladder(2.0, k) for k in range(6)] == [2.0, 2.38, 2.83, 3.36, 4.0, 4.76]


def test_a_split_rung_takes_a_third_probe():
    """repeats 3: two agreeing probes decide a rung; a split takes the third."""
    answers = iter([True, False, True, False, False])

    def probe(rate):
        return {"rate_mbps": rate, "faithful": next(answers)}
    ok, probes = cal.verdict(5.0, 3, probe)
    assert ok and len(probes) == 3
    ok, probes = cal.verdict(5.0, 3, probe)
    assert not ok and len(probes) == 2


@pytest.mark.parametrize("seed", range(3))
def test_a_noisy_machine_calibrates_within_one_step(seed):
    """A probe within 12% of the 13 Mb/s ceiling is a coin toss (a busy moment); three
    calibrations of that machine (different tosses) land on rungs at most one step apart."""
    results = []
    for run in range(3):
        rng = random.Random(seed * 10 + run)

        def probe(rate):
            near = abs(rate / 13.0 - 1) <= 0.12
            return {"rate_mbps": rate, "faithful": rng.random() < 0.5 if near else rate <= 13.0}
        results.append(cal.calibrate(repeats=3, probe_fn=probe, log=io.StringIO())["ceiling_mbps"])
    rungs = sorted({round(4 * math.log2(r / 2.0)) for r in results})
    assert rungs[-1] - rungs[0] <= 1, results
