"""`agglab calibrate`'s search, against a fake machine: no network, no clock.

Why a fake measurement: the search (step up by `factor`, then bisect between the last
faithful and the first unfaithful rate) is what decides the ceiling the experiments run at;
on a real machine its outcome depends on the load, so here each probe's allreduce is answered
by a model machine whose true ceiling the test knows, and the test checks which rates were
probed, the ceiling found and what was stored.
"""

from __future__ import annotations

import io
import json

import pytest

from agglab import calibrate as cal
from agglab.emulation import fidelity
from agglab.ground import wire


class FakeMachine:
    """run_allreduce as a machine that is faithful up to `ceiling` Mb/s (and, optionally,
    unfaithful below `floor`, as very slow links were when a window outlasted the timers)."""

    def __init__(self, ceiling: float, floor: float = 0.0):
        self.ceiling, self.floor, self.rates = ceiling, floor, []

    def run_allreduce(self, workers, elements, bw, window=None, **_):
        self.rates.append(bw)
        # the agents' int32 frames: one per block of K values, plus slot 0's lead frame
        ideal = (-(-elements // wire.K) + 1) * wire.FRAME_BYTES * 8 / (bw * 1e6)
        good = self.floor <= bw <= self.ceiling
        return {"ok": True, "seconds": ideal * (1.03 if good else 1.6), "retransmissions": 0,
                "fidelity": {"link_bound": good, "reason": "model"}}


@pytest.fixture
def machine(monkeypatch, tmp_path):
    import agglab.emulation.session

    def make(ceiling, floor=0.0):
        m = FakeMachine(ceiling, floor)
        monkeypatch.setattr(agglab.emulation.session, "run_allreduce", m.run_allreduce)
        return m
    monkeypatch.setenv("AGGLAB_CALIBRATION", str(tmp_path / "calibration.json"))
    return make


def test_steps_up_then_bisects_to_the_ceiling(machine, tmp_path):
    m = machine(ceiling=13.0)
    record = cal.calibrate(workers=4, start=2, factor=2, limit=200, refine=2, log=io.StringIO())
    # 2, 4, 8 faithful, 16 not; then (8+16)/2 = 12 faithful, (12+16)/2 = 14 not
    assert m.rates == [2, 4, 8, 16, 12, 14]
    assert record["ceiling_mbps"] == 12 and record["note"] == "first unfaithful rate: 14.0 Mb/s"
    assert [p["faithful"] for p in record["probes"]] == [True, True, True, False, True, False]
    stored = json.loads((tmp_path / "calibration.json").read_text())
    assert stored["ceiling_mbps"] == 12 and stored["workers"] == 4 and len(stored["probes"]) == 6
    w = stored["wakeup_latency"]                     # recorded beside the ceiling (ground/timerslack.py)
    assert w["samples"] > 0 and w["median_us"] <= w["p99_us"] and w["timer_slack_ns"] == 1


def test_a_slow_link_below_the_floor_does_not_stop_the_climb(machine):
    m = machine(ceiling=9.0, floor=3.0)
    record = cal.calibrate(workers=4, start=2, factor=2, limit=200, refine=1, log=io.StringIO())
    # 2 unfaithful: down four steps (all below the floor), then up past the start; bisect once
    assert m.rates == [2, 1.0, 0.5, 0.25, 0.125, 4, 8, 16, 12]
    assert record["ceiling_mbps"] == 8


def test_faithful_up_to_the_limit(machine):
    m = machine(ceiling=1000.0)
    record = cal.calibrate(workers=2, start=5, factor=2, limit=20, refine=2, log=io.StringIO())
    assert m.rates == [5, 10, 20] and record["ceiling_mbps"] == 20
    assert "search limit" in record["note"]


def test_a_start_too_fast_for_the_shape_steps_down_then_bisects(machine):
    m = machine(ceiling=0.3)
    record = cal.calibrate(workers=2, start=2, factor=2, limit=200, refine=2, log=io.StringIO())
    # 2, 1, 0.5 unfaithful, 0.25 faithful; then (0.25+0.5)/2 = 0.375 not, (0.25+0.375)/2 = 0.3125 not
    assert m.rates == [2, 1.0, 0.5, 0.25, 0.375, 0.3125] and record["ceiling_mbps"] == 0.25


def test_nothing_faithful_stores_nothing(machine, tmp_path):
    m = machine(ceiling=0.01)
    record = cal.calibrate(workers=2, start=2, factor=2, limit=200, refine=2, log=io.StringIO())
    assert m.rates == [2, 1.0, 0.5, 0.25, 0.125, 4, 8]   # four steps down, two past the start: stop
    assert record["ceiling_mbps"] is None and "unknown" in record["note"]
    assert not (tmp_path / "calibration.json").exists()


def test_a_probe_is_faithful_only_within_tolerance_and_link_bound(machine):
    machine(ceiling=100.0)
    p = cal.probe(10.0, workers=2, seconds=1.0, tolerance=0.01, log=io.StringIO())
    assert p["faithful"] is False                    # 3% over the analytic time, 1% allowed
    p = cal.probe(10.0, workers=2, seconds=1.0, tolerance=0.05, log=io.StringIO())
    assert p["faithful"] is True and p["elements"] == cal.elements_for(10.0, 1.0)


# -- one ceiling per backend ---------------------------------------------------------


def test_calibrating_bmv2_runs_bmv2_and_stores_its_ceiling_apart(machine, tmp_path, monkeypatch):
    import agglab.emulation.session

    backends = []
    m = machine(ceiling=13.0)

    def run(**kw):
        backends.append(kw.get("backend"))
        return m.run_allreduce(**kw)
    monkeypatch.setattr(agglab.emulation.session, "run_allreduce", run)
    fidelity.save_calibration({"ceiling_mbps": 20.0, "workers": 8})           # the soft backend's, earlier
    record = cal.calibrate(workers=4, start=2, factor=2, limit=200, refine=0, log=io.StringIO(), backend="bmv2")
    assert set(backends) == {"bmv2"} and record["ceiling_mbps"] == 8 and record["backend"] == "bmv2"
    assert fidelity.load_calibration("bmv2")["ceiling_mbps"] == 8
    assert fidelity.load_calibration()["ceiling_mbps"] == 20.0                  # soft's untouched
    assert "backends" not in fidelity.load_calibration()
    stored = json.loads((tmp_path / "calibration.json").read_text())
    assert stored["ceiling_mbps"] == 20.0 and stored["backends"]["bmv2"]["ceiling_mbps"] == 8


def test_a_file_without_backends_loads_as_the_soft_backends(tmp_path, monkeypatch):
    path = tmp_path / "calibration.json"
    monkeypatch.setenv("AGGLAB_CALIBRATION", str(path))
    path.write_text(json.dumps({"ceiling_mbps": 3.0, "workers": 8,
                                "shapes": {"fattree-k8-w128-rat": {"ceiling_mbps": 0.1, "workers": 128}}}))
    assert fidelity.load_calibration("soft")["ceiling_mbps"] == 3.0
    assert fidelity.ceiling_for(100) == (0.1, "fattree-k8-w128-rat")
    assert fidelity.load_calibration("bmv2") is None and fidelity.ceiling_for(8, "bmv2") is None


def test_each_backend_keeps_its_own_shapes(tmp_path, monkeypatch):
    monkeypatch.setenv("AGGLAB_CALIBRATION", str(tmp_path / "calibration.json"))
    fidelity.save_calibration({"ceiling_mbps": 4.0, "workers": 8}, "bmv2")
    fidelity.save_shape_calibration("fattree-k8-w32-rat", {"ceiling_mbps": 0.5, "workers": 32}, "bmv2")
    fidelity.save_calibration({"ceiling_mbps": 10.0, "workers": 8})
    fidelity.save_shape_calibration("fattree-k8-w32-rat", {"ceiling_mbps": 2.0, "workers": 32})
    fidelity.save_calibration({"ceiling_mbps": 3.0, "workers": 8}, "bmv2")     # a new BMv2 run keeps its shape
    assert fidelity.ceiling_for(8, "bmv2") == (3.0, "single-w8")
    assert fidelity.ceiling_for(20, "bmv2") == (0.5, "fattree-k8-w32-rat")
    assert fidelity.ceiling_for(8) == (10.0, "single-w8") and fidelity.ceiling_for(20) == (2.0, "fattree-k8-w32-rat")


def test_a_host_baseline_probe_runs_it_against_its_own_wire_time_and_stores_its_shape(machine, tmp_path,
                                                                                       monkeypatch):
    """`--scheme ring`: the probes run ring (not the dense pipeline) with a give-up that
    outlasts a PS shard, are judged against ring's wire time, and the ceiling is stored as
    the shape's ring record, which no in-network trend reads (fidelity.ceiling_for)."""
    import agglab.emulation.session
    from agglab.emulation.wire_model import wire_seconds
    from agglab.ground.runspec import RunSpec

    seen = []

    def run(workers, elements, bw, window=None, **kw):
        seen.append(kw)
        ideal = wire_seconds(RunSpec(workers=workers, elements=elements, bw=bw, window=window, **kw))
        good = bw <= 0.5
        return {"ok": True, "seconds": ideal * (1.03 if good else 1.6), "retransmissions": 0,
                "fidelity": {"link_bound": good, "reason": "model"}}
    machine(ceiling=13.0)
    monkeypatch.setattr(agglab.emulation.session, "run_allreduce", run)
    shape = {"topology": "fattree", "k": 4, "scheme": "ring"}
    record = cal.calibrate(workers=16, start=2, factor=2, limit=200, refine=0, log=io.StringIO(), shape=shape)
    assert record["ceiling_mbps"] == 0.5 and {k["algorithm"] for k in seen} == {"ring"}
    assert all(k["give_up"] == cal.HOST_GIVE_UP for k in seen)
    assert all(abs(p["analytic_seconds"] - 3.0) < 0.5 for p in record["probes"])   # sized for 3 s of ring's wire
    assert fidelity.ceiling_for_shape("fattree-k4-w16-ring") == 0.5
    assert fidelity.ceiling_for(16) is None                   # the ring's record answers no other trend
