"""Calibration per trend shape on BMv2 (experiments/shapes.py): each trend of the default suite
maps to the shape its definition describes, runs at that shape's own ceiling when it was
calibrated (else today's rule), and a BMv2 suite calibrates the shapes it lacks first.

No network: calibrations are hand-written files or fakes, runs are fakes. The expected
shapes below are read off the YAML files by hand (experiments/configs/default.yaml and
experiments/trends/*.yaml), not computed with the code under test.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
import yaml

from agglab.emulation import fidelity
from agglab.experiments import cli
from agglab.experiments.runner import load_suite, trend_ceiling, trend_rates
from agglab.experiments.shapes import key_of, trend_shape

ROOT = Path(__file__).resolve().parent.parent
DEFAULT = ROOT / "experiments" / "configs" / "default.yaml"

# trend -> (shape key, shape), from the YAML files:
# switchml: run topology single, sweep workers [2, 4, 8, 16] in the suite, dense switchml
# omnireduce: single, 8 workers, sparse series omnireduce, suite densities [1.0, 0.1, 0.01]
# rat / rat_failures: leafspine, 8 workers, in-network series tree rat
# bml: first in-network series bml-host: bcube k 1 tree bml, 9 workers (ps-fattree is a PS)
# packing: leafspine, 8 workers, first in-network series tree packing
# pace: single, 4 workers: covered by the default 8 workers on one switch
# atp: fattree k 4, 4 workers a job, up to 4 jobs: 16 workers, no tree given
EXPECTED = {
    "switchml": ("single-w16", {"topology": "single", "k": None, "workers": 16, "tree": None, "scheme": "dense"}),
    "omnireduce": ("single-w8-sparse", {"topology": "single", "k": None, "workers": 8, "tree": None,
                                        "scheme": "sparse", "density": 0.01}),
    "rat": ("leafspine-w8-rat", {"topology": "leafspine", "k": None, "workers": 8, "tree": "rat", "scheme": "dense"}),
    "rat_failures": ("leafspine-w8-rat", {"topology": "leafspine", "k": None, "workers": 8, "tree": "rat",
                                          "scheme": "dense"}),
    "bml": ("bcube-k1-w9-bml", {"topology": "bcube", "k": 1, "workers": 9, "tree": "bml", "scheme": "dense"}),
    "packing": ("leafspine-w8-packing", {"topology": "leafspine", "k": None, "workers": 8, "tree": "packing",
                                         "scheme": "dense"}),
    "pace": ("single-w8", {"topology": "single", "k": None, "workers": 8, "tree": None, "scheme": "dense"}),
    "atp": ("fattree-k4-w16", {"topology": "fattree", "k": 4, "workers": 16, "tree": None, "scheme": "dense"}),
}


@pytest.fixture(autouse=True)
def calibration(tmp_path, monkeypatch):
    path = tmp_path / "calibration.json"
    monkeypatch.setenv("AGGLAB_CALIBRATION", str(path))
    return path


def test_each_default_trend_maps_to_the_shape_its_definition_describes():
    suite = load_suite(DEFAULT, backend="bmv2")
    got = {d.name: (key_of(trend_shape(d)), trend_shape(d)) for d in suite.definitions}
    assert got == EXPECTED


def test_shape_keys_written_before_schemes_still_read():
    assert fidelity.shape_key("fattree", 128, 8, "rat") == "fattree-k8-w128-rat"
    assert fidelity.shape_key("fattree", 128, 8, "rat", "dense") == "fattree-k8-w128-rat"
    assert fidelity.shape_key("single", 8, scheme="sparse") == "single-w8-sparse"


def write(path: Path, bmv2: dict, soft: dict | None = None) -> None:
    path.write_text(json.dumps({**(soft or {}), "backends": {"bmv2": bmv2}}))


def test_a_trend_runs_at_its_exact_shape_else_falls_back(calibration):
    write(calibration, {"ceiling_mbps": 2.0, "workers": 8, "shapes": {
        "leafspine-w8-rat": {"ceiling_mbps": 1.0, "workers": 8},
        "single-w8-sparse": {"ceiling_mbps": 1.5, "workers": 8},
        "fattree-k8-w32-rat": {"ceiling_mbps": 0.5, "workers": 32}}})
    assert fidelity.ceiling_for_shape("leafspine-w8-rat", "bmv2") == 1.0
    assert fidelity.ceiling_for_shape("single-w8", "bmv2") == 2.0            # the default record's own key
    assert fidelity.ceiling_for_shape("bcube-k1-w9-bml", "bmv2") is None
    suite = load_suite(DEFAULT, backend="bmv2")
    assert suite.ceiling_mbps == 1.2                                         # 60% of 2
    by = {d.name: trend_ceiling(suite, d) for d in suite.definitions}
    assert by["rat"] == by["rat_failures"] == 0.6                            # 60% of its own 1.0
    assert by["omnireduce"] == 0.9                                           # 60% of single-w8-sparse's 1.5
    assert by["bml"] == 0.3        # bcube-k1-w9-bml missing: today's rule, the smallest shape >= 9 workers
    assert by["packing"] == by["pace"] == 1.2                                # missing, 8 workers: the suite's
    rates = trend_rates(suite)
    assert rates["rat"] == "0.6 Mb/s (shape leafspine-w8-rat, 60% of its 1 Mb/s)"
    assert rates["packing"] == "1.2 Mb/s (shape leafspine-w8-packing, not calibrated: the suite's rate)"


def test_a_shape_faster_than_the_suite_does_not_raise_the_rate(calibration):
    write(calibration, {"ceiling_mbps": 2.0, "workers": 8, "shapes": {"leafspine-w8-rat": {"ceiling_mbps": 4.0}}})
    suite = load_suite(DEFAULT, backend="bmv2")
    assert {trend_ceiling(suite, d) for d in suite.definitions if d.name == "rat"} == {1.2}


def test_the_soft_backend_keeps_its_rule(calibration):
    calibration.write_text(json.dumps({"ceiling_mbps": 10.0, "workers": 8,
                                       "shapes": {"leafspine-w8-rat": {"ceiling_mbps": 1.0, "workers": 8}}}))
    suite = load_suite(DEFAULT)
    assert {trend_ceiling(suite, d) for d in suite.definitions if d.name == "rat"} == {8.0}


def test_the_dry_run_lists_the_shapes_it_would_calibrate(tmp_path, calibration):
    write(calibration, {"ceiling_mbps": 2.0, "workers": 8, "shapes": {
        "leafspine-w8-rat": {"ceiling_mbps": 1.0, "workers": 8}}})
    log = io.StringIO()
    assert cli.main(["default", "--backend", "bmv2", "--dry-run", "--out", str(tmp_path / "out")], log=log,
                    calibrate_fn=lambda *a: pytest.fail("a dry run calibrated")) == 0
    text = log.getvalue()
    assert "5 bmv2 trend shape(s) without a calibration" in text
    listed = [line.split()[0] for line in text.splitlines() if line.startswith("    ") and "agglab calibrate" in line]
    assert listed == ["single-w16", "single-w8-sparse", "bcube-k1-w9-bml", "leafspine-w8-packing", "fattree-k4-w16"]
    assert ("`agglab calibrate --backend bmv2 --workers 8 --scheme sparse --density 0.01`" in text
            and "`agglab calibrate --backend bmv2 --workers 16 --topology fattree --k 4`" in text)


def _rat_suite_on_bmv2(tmp_path, calibration, calibrate_fn) -> tuple[int, str, list]:
    """The rat trend at 1:4 as a BMv2 suite whose default shape was calibrated at 2 Mb/s, its
    runs faked: (exit code, log, the specs it ran)."""
    suite = tmp_path / "s.yaml"
    suite.write_text(yaml.safe_dump({"name": "s", "repeats": 1, "definitions": [
        {"file": str(ROOT / "experiments" / "trends" / "rat.yaml"), "sweep": {"oversubscription": [4]}}]}))
    write(calibration, {"ceiling_mbps": 2.0, "workers": 8})
    seen = []

    def run(specs):
        for s in specs:
            seen.append(s)
            yield {"ok": True, "exact": True, "seconds": 1.0, "fidelity": {"cpu_bound": False, "link_bound": True}}

    log = io.StringIO()
    code = cli.main([str(suite), "--backend", "bmv2", "--out", str(tmp_path / "out")], run_fn=run, log=log,
                    calibrate_fn=calibrate_fn)
    return code, log.getvalue(), seen


def _fastest_link(seen) -> float:
    return max(link[2] for s in seen for link in yaml.safe_load(Path(s.topology).read_text())["links"])


def test_a_bmv2_suite_calibrates_its_trend_shapes_first(tmp_path, calibration):
    asked = []

    def calibrate(backend, shape=None):
        asked.append(key_of(shape))
        fidelity.save_shape_calibration(key_of(shape), {"ceiling_mbps": 1.0, "workers": 8}, backend)

    code, log, seen = _rat_suite_on_bmv2(tmp_path, calibration, calibrate)
    assert code == 0 and asked == ["leafspine-w8-rat"]
    assert "no bmv2 calibration for shape leafspine-w8-rat (rat) yet: calibrating it first" in log
    assert "bmv2 ceiling for leafspine-w8-rat: 1 Mb/s per link (calibrated in" in log
    assert seen and _fastest_link(seen) == 0.6        # the fastest (host) links at 60% of the shape's 1 Mb/s


def test_a_shape_with_no_faithful_rate_does_not_stop_the_suite(tmp_path, calibration):
    """BMv2's k=4 fat-tree with 16 workers found no faithful rate on 2 cores (2026-12-06): the
    suite aborted after 16 minutes with nothing run. Its trends now run at the suite's ceiling."""
    code, log, seen = _rat_suite_on_bmv2(tmp_path, calibration,
                                         lambda backend, shape=None: None)    # stores nothing: no faithful rate
    assert code == 0 and seen
    assert "warning: calibrating bmv2 for shape leafspine-w8-rat (rat) found no faithful rate" in log
    assert "rat: run at the suite's ceiling; runs that are CPU-bound there are flagged" in log
    assert _fastest_link(seen) == 1.2                 # 60% of the suite's 2 Mb/s


def test_a_sparse_shape_is_probed_on_the_sparse_pipeline_and_stored_as_its_own(monkeypatch):
    import agglab.emulation.session
    from agglab import calibrate as cal

    runs = []

    def fake(**kw):
        runs.append(kw)
        return {"ok": True, "seconds": 1e-9, "retransmissions": 0, "fidelity": {"link_bound": kw["bw"] <= 1,
                                                                                "reason": "m"}}

    monkeypatch.setattr(agglab.emulation.session, "run_allreduce", fake)
    fidelity.save_calibration({"ceiling_mbps": 2.5, "workers": 8}, "bmv2")
    cal.calibrate(workers=8, start=1, factor=2, limit=4, refine=0, log=io.StringIO(), backend="bmv2",
                  shape={"topology": "single", "scheme": "sparse", "density": 0.01})
    assert {(r["algorithm"], r["density"]) for r in runs} == {("omnireduce", 0.01)}
    assert fidelity.ceiling_for_shape("single-w8-sparse", "bmv2") == 1.0
    assert fidelity.load_calibration("bmv2")["ceiling_mbps"] == 2.5            # the dense default kept


def test_a_search_that_found_no_rate_is_stored_and_not_repeated(tmp_path, calibration, monkeypatch):
    """The k=4 fat-tree's search on BMv2 took over 8 minutes and found nothing; a suite that
    forgot it searched it again on every run. The search is now stored with no ceiling: the
    next suite does not calibrate that shape, says so in one line, and runs its trends at the
    suite's ceiling."""
    import agglab.emulation.session
    from agglab import calibrate as cal

    monkeypatch.setattr(agglab.emulation.session, "run_allreduce",     # never within the tolerance
                        lambda **kw: {"ok": True, "seconds": 1e9, "retransmissions": 0,
                                      "fidelity": {"link_bound": False, "reason": "cpu"}})
    log = io.StringIO()
    record = cal.calibrate(workers=8, start=1, factor=2, limit=2, refine=0, down=1, log=log, backend="bmv2",
                           shape={"topology": "leafspine", "tree": "rat"})
    assert record["ceiling_mbps"] is None
    assert "no rate was faithful for leafspine-w8-rat" in log.getvalue()
    assert fidelity.shape_record("leafspine-w8-rat", "bmv2")["probes"]            # the search is kept
    assert fidelity.ceiling_for_shape("leafspine-w8-rat", "bmv2") is None
    assert fidelity.load_calibration("bmv2").get("ceiling_mbps") is None          # no default record made up

    def searched_again(backend, shape=None):
        if shape is None:                                     # the default shape is still to calibrate
            fidelity.save_calibration({"ceiling_mbps": 2.0, "workers": 8}, backend)
            return
        pytest.fail(f"searched {key_of(shape)} again")

    suite = tmp_path / "s.yaml"
    suite.write_text(yaml.safe_dump({"name": "s", "repeats": 1, "definitions": [
        {"file": str(ROOT / "experiments" / "trends" / "rat.yaml"), "sweep": {"oversubscription": [4]}}]}))
    seen, out = [], io.StringIO()

    def run(specs):
        for s in specs:
            seen.append(s)
            yield {"ok": True, "exact": True, "seconds": 1.0, "fidelity": {"cpu_bound": False, "link_bound": True}}

    assert cli.main([str(suite), "--backend", "bmv2", "--out", str(tmp_path / "out")], run_fn=run, log=out,
                    calibrate_fn=searched_again) == 0
    text = out.getvalue()
    assert ("warning: bmv2 shape leafspine-w8-rat (rat) has no faithful rate on this machine (searched "
            in text and ", down to 0.5 Mb/s)" in text)
    assert "`agglab calibrate --backend bmv2 --workers 8 --topology leafspine --tree rat` searches again" in text
    assert seen and _fastest_link(seen) == 1.2                 # 60% of the suite's 2 Mb/s
