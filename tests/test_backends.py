"""Experiments per backend: each backend's own ceiling, its own results folder, the
calibration a fresh BMv2 gets first, and the report's soft and BMv2 ratios side by side.

No network: the runs are answered by fakes whose times the tests choose, so each expected
ratio below is worked out by hand from those times.
"""

from __future__ import annotations

import io
from pathlib import Path

import pytest
import yaml

from agglab.emulation import fidelity
from agglab.experiments import cli
from agglab.experiments.runner import load_suite, plan, results_name, twin_dir
from agglab.ground import wire


@pytest.fixture(autouse=True)
def calibration(tmp_path, monkeypatch):
    path = tmp_path / "calibration.json"
    monkeypatch.setenv("AGGLAB_CALIBRATION", str(path))
    return path


def definition(tmp_path) -> Path:
    """Two series on one switch; claims: flat in workers, and `big` 3x slower than in-network."""
    d = {"name": "t", "network": {"link": "100Gbps", "gradient": "100MB"}, "emulated": {"gradient": "64KiB"},
         "run": {"topology": "single"}, "repeats": 1,
         "series": {"in-network": {"algorithm": "switchml"}, "big": {"algorithm": "switchml", "dtype": "float32"}},
         "sweep": {"workers": [2, 8]},
         "claims": [{"text": "flat", "ratio": [{"workers": 8}, {"workers": 2}], "paper": 1.0, "expect": "at_most"},
                    {"text": "big is 3x slower", "ratio": [{"series": "big", "workers": 8}, {"workers": 8}],
                     "paper": 3.0, "expect": "at_least"}]}
    path = tmp_path / "t.yaml"
    path.write_text(yaml.safe_dump(d, sort_keys=False))
    return path


def fake_run(big_seconds: float, seen: list):
    """in-network 1 s at every size; `big` (float32) `big_seconds`; link-bound throughout."""
    fid = {"cpu_bound": False, "link_bound": True, "reason": "synthetic",
           "link": {"link": "s1->h1", "configured_mbps": 1.0, "achieved_mbps": 0.98, "utilisation": 0.98},
           "switch_cpu": {"s1": 0.3}, "host_cpu_max": 0.1, "machine_busy": 0.5}

    def run(specs):
        for s in specs:
            seen.append(s)
            yield {"ok": True, "exact": True, "seconds": big_seconds if s.dtype == "float32" else 1.0, "fidelity": fid}
    return run


def test_each_backend_runs_at_its_own_ceiling(tmp_path):
    fidelity.save_calibration({"ceiling_mbps": 10.0, "workers": 8})
    fidelity.save_calibration({"ceiling_mbps": 2.5, "workers": 8}, "bmv2")
    path = definition(tmp_path)
    soft, bmv2 = load_suite(path), load_suite(path, backend="bmv2")
    assert (soft.backend, soft.ceiling_mbps) == ("soft", 8.0)                  # 80% of 10
    assert (bmv2.backend, bmv2.ceiling_mbps) == ("bmv2", 1.5)                  # 60% of 2.5
    assert bmv2.ceiling_source.startswith("60% of the bmv2 ceiling 2.5")
    specs = [p.spec for _, p, _ in plan(bmv2, tmp_path / "out")]
    assert {s.backend for s in specs} == {"bmv2"} and {s.bw for s in specs} == {1.5}   # 100 Gb/s brought to 1.5 Mb/s


def test_a_larger_trend_uses_the_backends_own_shape(tmp_path):
    from agglab.experiments.runner import scale_ceiling

    fidelity.save_calibration({"ceiling_mbps": 10.0, "workers": 8})
    fidelity.save_shape_calibration("fattree-k8-w32-rat", {"ceiling_mbps": 2.0, "workers": 32})
    fidelity.save_calibration({"ceiling_mbps": 2.5, "workers": 8}, "bmv2")
    fidelity.save_shape_calibration("fattree-k8-w32-rat", {"ceiling_mbps": 0.5, "workers": 32}, "bmv2")
    path = definition(tmp_path)
    assert scale_ceiling(load_suite(path), 32) == 1.6                   # 80% of soft's 2
    assert scale_ceiling(load_suite(path, backend="bmv2"), 32) == 0.3   # 60% of BMv2's 0.5


def test_results_folders_per_backend_and_the_twin_beside_them():
    assert results_name("quick", 64, "soft") == "quick" and results_name("quick", 64, "bmv2") == "quick-bmv2"
    assert results_name("quick", 256, "bmv2") == "quick-bmv2-k256"
    root = Path("/r")
    assert twin_dir(root / "quick", "soft", "bmv2", 64) == root / "quick-bmv2"
    assert twin_dir(root / "quick-bmv2", "bmv2", "soft", 64) == root / "quick"
    assert twin_dir(root / "quick-bmv2-k256", "bmv2", "soft", 256) == root / "quick-k256"


def test_an_uncalibrated_bmv2_is_calibrated_before_it_runs(tmp_path):
    asked, seen = [], []

    def calibrate(backend):
        asked.append(backend)
        fidelity.save_calibration({"ceiling_mbps": 2.5, "workers": 8}, backend)
        return 0

    log = io.StringIO()
    code = cli.main([str(definition(tmp_path)), "--backend", "bmv2", "--out", str(tmp_path / "out")],
                    run_fn=fake_run(3.0, seen), log=log, calibrate_fn=calibrate)
    assert code == 0 and asked == ["bmv2"]
    assert "no bmv2 calibration for 8 workers on one switch yet: calibrating it first" in log.getvalue()
    assert {s.bw for s in seen} == {1.5} and {s.backend for s in seen} == {"bmv2"}   # 60% of 2.5
    assert (tmp_path / "out" / results_name("t", wire.K, "bmv2") / "report.md").exists()


def test_a_calibration_that_finds_nothing_stops_with_the_command_to_retry(tmp_path):
    seen = []
    log = io.StringIO()
    code = cli.main([str(definition(tmp_path)), "--backend", "bmv2", "--out", str(tmp_path / "out")],
                    run_fn=fake_run(3.0, seen), log=log, calibrate_fn=lambda backend: 1)
    assert code == 2 and seen == []
    assert "agglab calibrate --backend bmv2" in log.getvalue().splitlines()[-1]


def test_the_soft_backend_keeps_its_default_without_calibrating(tmp_path):
    seen = []
    code = cli.main([str(definition(tmp_path)), "--out", str(tmp_path / "out")], run_fn=fake_run(3.0, seen),
                    log=io.StringIO(), calibrate_fn=lambda backend: pytest.fail("soft was calibrated"))
    assert code == 0 and {s.bw for s in seen} == {fidelity.DEFAULT_CEILING_MBPS}


def test_the_report_shows_soft_and_bmv2_ratios_side_by_side(tmp_path):
    fidelity.save_calibration({"ceiling_mbps": 2.5, "workers": 8}, "bmv2")
    path, out = definition(tmp_path), tmp_path / "out"
    # soft: big 3.0 s over in-network 1.0 s -> 3; BMv2: 2.4 s -> 2.4, which is 2.4/3 - 1 = 20% below soft
    assert cli.main([str(path), "--out", str(out)], run_fn=fake_run(3.0, []), log=io.StringIO()) == 0
    soft_report = (out / results_name("t", wire.K) / "report.md").read_text()
    assert "on the software twin (soft)" in soft_report and "## Soft and BMv2 side by side" not in soft_report
    assert "No bmv2 run of this suite beside it" in soft_report                     # no BMv2 results yet
    assert cli.main([str(path), "--backend", "bmv2", "--out", str(out)], run_fn=fake_run(2.4, []),
                    log=io.StringIO()) == 0
    report = (out / results_name("t", wire.K, "bmv2") / "report.md").read_text()
    assert "# agglab experiment `t` on BMv2 simple_switch (bmv2)" in report and "| backend | bmv2 |" in report
    table = report.split("## Soft and BMv2 side by side")[1].split("\n## ")[0]
    rows = {line.split(" | ")[1]: line.split(" | ") for line in table.splitlines() if line.startswith("| t |")}
    # columns: trend, claim, bound, soft, soft vs bound, BMv2, BMv2 vs bound, BMv2 vs soft
    assert rows["flat"][2] == "1"                      # 8 and 2 workers move the same frames per link: 1 on both
    assert rows["flat"][3] == "1" and rows["flat"][5] == "1" and rows["flat"][7] == "within 10% |"
    assert " / " in rows["big is 3x slower"][2]        # each backend's own bound: the scales differ
    assert rows["big is 3x slower"][3] == "3" and rows["big is 3x slower"][5] == "2.4"
    assert rows["big is 3x slower"][7] == "20% below |"
    # the soft report, written again (a resume runs nothing), now finds the BMv2 results too
    assert cli.main([str(path), "--out", str(out)], run_fn=fake_run(3.0, []), log=io.StringIO()) == 0
    again = (out / results_name("t", wire.K) / "report.md").read_text()
    assert "| t | big is 3x slower |" in again.split("## Soft and BMv2 side by side")[1]


def test_a_trend_larger_than_8_workers_gets_its_own_bmv2_calibration_first(tmp_path):
    """switchml-like: 2 and 16 workers on one switch; BMv2 calibrated for 8 only -> 16 next."""
    raw = yaml.safe_load(definition(tmp_path).read_text())
    raw["sweep"] = {"workers": [2, 16]}
    raw["claims"] = [{"text": "flat", "ratio": [{"workers": 16}, {"workers": 2}], "paper": 1.0, "expect": "at_most"}]
    path = tmp_path / "big.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    asked, seen = [], []

    def calibrate(backend, shape=None):
        workers = shape and shape["workers"]
        asked.append(workers)
        rate = {None: 2.5, 16: 1.25}[workers]
        if workers:
            fidelity.save_shape_calibration(f"single-w{workers}", {"ceiling_mbps": rate, "workers": workers}, backend)
        else:
            fidelity.save_calibration({"ceiling_mbps": rate, "workers": 8}, backend)
        return 0

    code = cli.main([str(path), "--backend", "bmv2", "--out", str(tmp_path / "out")], run_fn=fake_run(3.0, seen),
                    log=io.StringIO(), calibrate_fn=calibrate)
    assert code == 0 and asked == [None, 16]
    assert {s.bw for s in seen} == {0.75}            # 60% of the 16-worker ceiling 1.25, for the whole trend


def test_more_than_8_workers_on_one_switch_are_stored_as_a_shape(monkeypatch):
    import agglab.emulation.session
    from agglab import calibrate as cal

    monkeypatch.setattr(agglab.emulation.session, "run_allreduce", lambda **kw: {
        "ok": True, "seconds": 1e-9, "retransmissions": 0, "fidelity": {"link_bound": kw["bw"] <= 1, "reason": "m"}})
    fidelity.save_calibration({"ceiling_mbps": 2.5, "workers": 8}, "bmv2")
    cal.calibrate(workers=16, start=1, factor=2, limit=4, refine=0, log=io.StringIO(), backend="bmv2")
    assert fidelity.load_calibration("bmv2")["ceiling_mbps"] == 2.5            # the 8-worker record kept
    assert fidelity.ceiling_for(16, "bmv2") == (1.0, "single-w16")


def suite_line(log: str) -> str:
    """The dry run's plan line: `NAME: N trend(s), R runs, ... -> OUT/FOLDER/`."""
    return next(line for line in log.splitlines() if " trend(s), " in line)


@pytest.mark.parametrize("argv, suite, folder", [
    (["--backend", "bmv2"], "bmv2", "bmv2-bmv2"),                    # BMv2's own suite when none is named
    ([], "default", "default"),                                      # the twin keeps the default suite
    (["--backend", "soft"], "default", "default"),
    (["quick", "--backend", "bmv2"], "quick", "quick-bmv2"),         # a named suite wins on either backend
    (["bmv2", "--backend", "soft"], "bmv2", "bmv2"),                 # BMv2's suite on the twin: its soft side
])
def test_the_backend_picks_its_own_suite_unless_one_is_named(tmp_path, argv, suite, folder):
    log = io.StringIO()
    assert cli.main([*argv, "--dry-run", "--out", str(tmp_path)], log=log) == 0
    line = suite_line(log.getvalue())
    assert line.startswith(f"{suite}: ") and line.endswith(f"-> {tmp_path / folder}/")


def claim_texts(suite) -> set[tuple[str, str]]:
    return {(d.name, c["text"]) for d in suite.definitions for c in d.claims_raw}


def test_the_bmv2_suite_makes_every_claim_of_the_default_suite_on_networks_bmv2_carries(tmp_path):
    default, bmv2 = (load_suite(cli.resolve(name), backend="bmv2") for name in ("default", "bmv2"))
    assert claim_texts(bmv2) == claim_texts(default) and claim_texts(bmv2)
    assert bmv2.about                                # the report says why its sizes differ
    # the shapes BMv2 could not carry (experiments/shapes.py): no trend of its suite on the k=4 fat-tree's 16 workers
    from agglab.experiments.shapes import suite_shapes
    assert "fattree-k4-w16" in suite_shapes(default) and "fattree-k4-w16" not in suite_shapes(bmv2)


def test_every_claim_of_the_bmv2_suite_reads_points_the_suite_runs(tmp_path):
    """Run the suite with a fake data plane (1 s a run): no claim of its report lacks data."""
    def calibrate(backend, shape=None):
        if shape is None:
            fidelity.save_calibration({"ceiling_mbps": 1.5, "workers": 8}, backend)
        else:
            from agglab.experiments.shapes import key_of
            fidelity.save_shape_calibration(key_of(shape), {"ceiling_mbps": 0.5, "workers": shape["workers"],
                                                            "shape": shape}, backend)
        return 0

    fid = {"cpu_bound": False, "link_bound": True, "reason": "synthetic"}
    code = cli.main(["--backend", "bmv2", "--out", str(tmp_path)], log=io.StringIO(), calibrate_fn=calibrate,
                    run_fn=lambda specs: iter([{"ok": True, "exact": True, "seconds": 1.0, "fidelity": fid}
                                               for _ in specs]))
    report = (tmp_path / results_name("bmv2", wire.K, "bmv2") / "report.md").read_text()
    trends = report.split("## Trends: ours vs the papers")[1].split("\n## ")[0]
    assert code == 0 and "| atp |" in trends and "no data" not in trends


def test_the_report_names_its_suite_and_where_the_other_backends_run_of_it_is(tmp_path):
    fidelity.save_calibration({"ceiling_mbps": 2.5, "workers": 8}, "bmv2")
    raw = yaml.safe_load(definition(tmp_path).read_text())
    suite = tmp_path / "pair.yaml"
    suite.write_text(yaml.safe_dump({"name": "pair", "about": "Why  these\n sizes.", "definitions": ["t.yaml"]}))
    out = tmp_path / "out"
    assert raw and cli.main([str(suite), "--backend", "bmv2", "--out", str(out)], run_fn=fake_run(3.0, []),
                            log=io.StringIO()) == 0
    report = (out / results_name("pair", wire.K, "bmv2") / "report.md").read_text()
    assert f"Suite **pair** (`{suite}`) on backend **bmv2**. Why these sizes." in report
    assert f"No soft run of this suite beside it ({out / results_name('pair', wire.K)}/): " \
           f"`agglab experiment {suite} --backend soft --out {out}`" in report
    assert "## Soft and BMv2 side by side" not in report
    assert cli.main([str(suite), "--backend", "soft", "--out", str(out)], run_fn=fake_run(3.0, []),
                    log=io.StringIO()) == 0
    soft = (out / results_name("pair", wire.K) / "report.md").read_text()
    assert "Suite **pair**" in soft and "on backend **soft**" in soft and "No bmv2 run" not in soft
    assert "## Soft and BMv2 side by side" in soft


def test_a_dry_run_counts_the_calibrations_a_fresh_clone_runs_first(tmp_path):
    log = io.StringIO()
    assert cli.main(["--backend", "bmv2", "--dry-run", "--out", str(tmp_path)], log=log) == 0
    text = log.getvalue()
    runs_min = float(suite_line(text).split("estimated ")[1].split(" min")[0])
    shapes_min = float(text.split("first, ~")[1].split(" min in all")[0])
    total = float(text.split("in all: ~")[1].split(" min with the calibrations")[0])
    assert total >= runs_min + shapes_min - 1 and "is not calibrated" in text
