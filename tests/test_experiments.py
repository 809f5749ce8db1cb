"""The experiment runner, driven by a fake `run_allreduce` (no Mininet, no root).

Why a fake: the runner's job is bookkeeping (rows, medians, plots, report, exit
status); the fake's timings are known in advance, so every number the runner
writes can be checked exactly.
"""

from __future__ import annotations

import csv
import io
import platform
import re
import sys
from pathlib import Path

import matplotlib.image
import pytest
import yaml

from experiments.cli import main
from experiments.config import ConfigError, load_config, parse_config
from experiments.runner import RESULT_KEYS, RUN_COLUMNS

REPO = Path(__file__).resolve().parent.parent
CONFIGS = REPO / "experiments" / "configs"
PLOTS = ("completion_vs_workers.png", "goodput_vs_workers.png", "completion_vs_size.png", "goodput_vs_size.png")
BASE = {
    "name": "t", "backend": "soft", "repeats": 3, "dtype": "int32", "loss": 0.0, "window": None, "seed": 10,
    "sweep": {"workers": [2, 3, 4], "elements": [256, 1024, 4096]},
    "fixed": {"elements": 1024, "workers": 4},
}
# (workers, elements) of BASE: the workers sweep at 1024, then the size sweep at 4 workers;
# (4, 1024) is in both and runs once per repeat.
POINTS = [(2, 1024), (3, 1024), (4, 1024), (4, 256), (4, 4096)]
SLOWDOWN = {10: 1.0, 11: 5.0, 12: 2.0}   # seed -> factor: median (x2) differs from mean (x8/3)


def seconds_for(workers: int, elements: int, seed: int) -> float:
    """The fake's completion time: grows with workers x size, differs per repeat."""
    return round((0.05 + workers * elements * 1e-5) * SLOWDOWN.get(seed, 1.0), 6)


class FakeRun:
    """Stands in for emulation.session.run_allreduce; `fail` maps (workers, elements) to a behaviour."""

    def __init__(self, fail: dict | None = None):
        self.calls: list[dict] = []
        self.fail = fail or {}

    def __call__(self, *, workers, elements, dtype="int32", loss=0.0, backend="soft", window=None, seed=0):
        self.calls.append(dict(workers=workers, elements=elements, dtype=dtype, loss=loss,
                               backend=backend, window=window, seed=seed))
        mode = self.fail.get((workers, elements))
        if mode == "raise":
            raise RuntimeError(f"switch s1 did not start (workers={workers})")
        if mode == "interrupt" and len(self.calls) > 1:
            raise KeyboardInterrupt
        secs = seconds_for(workers, elements, seed)
        result = dict(ok=True, exact=mode != "inexact", workers=workers, elements=elements, dtype=dtype,
                      seconds=secs, goodput_mbps=round(elements * 32 / secs / 1e6, 4),
                      packets=workers * (elements // 64 + 1), retransmissions=seed - 10,
                      max_abs_error=3 if mode == "inexact" else 0, backend=backend,
                      switch={"contrib": workers * elements // 64}, extra_note="fake")
        if mode == "missing":
            del result["seconds"]
        if mode == "checker":   # how emulation.session reports a failed worker
            result.update(ok=False, exact=False, seconds=None, errors=["rank 1: timed out", "rank 2: gone"])
        return result


def write_config(tmp_path: Path, **changes) -> Path:
    cfg = {**BASE, **changes}
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def run(tmp_path: Path, fake: FakeRun, *extra: str, **changes) -> tuple[int, Path, str]:
    log = io.StringIO()
    rc = main(["--config", str(write_config(tmp_path, **changes)), "--out", str(tmp_path / "results"), *extra],
              run_fn=fake, log=log)
    return rc, tmp_path / "results" / changes.get("name", "t"), log.getvalue()


def read_csv(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def test_runs_csv_has_one_row_per_run_with_all_keys(tmp_path):
    fake = FakeRun()
    rc, out, log = run(tmp_path, fake)
    assert rc == 0
    rows = read_csv(out / "runs.csv")
    assert len(rows) == len(POINTS) * 3 == len(fake.calls)
    header = list(rows[0])
    assert header[:len(RUN_COLUMNS)] == list(RUN_COLUMNS)
    assert set(RESULT_KEYS) <= set(header) and {"extra_note", "switch.contrib"} <= set(header)
    got = sorted((int(r["workers"]), int(r["elements"]), int(r["repeat"]), int(r["seed"])) for r in rows)
    assert got == sorted((w, e, rep, 10 + rep) for w, e in POINTS for rep in range(3))
    for r in rows:
        assert r["ok"] == "True" and r["exact"] == "True" and r["error"] == ""
        assert float(r["seconds"]) == seconds_for(int(r["workers"]), int(r["elements"]), int(r["seed"]))
    assert all(c["backend"] == "soft" and c["dtype"] == "int32" and c["window"] is None for c in fake.calls)
    assert "[1/15] workers=2 elements=1024 rep=1 ... " in log and ", exact" in log


def test_summary_holds_the_median_of_each_point(tmp_path):
    rc, out, _ = run(tmp_path, FakeRun())
    assert rc == 0
    summary = read_csv(out / "summary.csv")
    assert [(int(s["workers"]), int(s["elements"])) for s in summary] == POINTS
    for s in summary:
        w, e = int(s["workers"]), int(s["elements"])
        assert float(s["seconds_median"]) == pytest.approx(seconds_for(w, e, 12))   # factors 1, 5, 2
        assert float(s["seconds_min"]) == pytest.approx(seconds_for(w, e, 10))
        assert float(s["seconds_max"]) == pytest.approx(seconds_for(w, e, 11))
        assert float(s["retransmissions_median"]) == 1.0
        assert (s["runs"], s["ok"], s["exact"], s["errors"]) == ("3", "3", "3", "0")
    assert [s["sweeps"] for s in summary] == ["workers", "workers", "workers+elements", "elements", "elements"]


def test_plots_exist_and_are_valid_pngs(tmp_path):
    _, out, _ = run(tmp_path, FakeRun())
    for name in PLOTS:
        data = (out / name).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR", name
        image = matplotlib.image.imread(out / name)
        assert image.shape[0] > 200 and image.shape[1] > 300, name
        assert image.std() > 0.01, f"{name} is blank"


def test_report_names_backend_machine_every_point_and_plots(tmp_path):
    _, out, _ = run(tmp_path, FakeRun(), "--backend", "bmv2")
    report = (out / "report.md").read_text()
    assert "backend `bmv2`" in report and platform.release() in report
    assert re.search(r"\| cores \| \d+ ", report)
    for w, e in POINTS:
        assert re.search(rf"^\| {w} \| {e} \| .* \| 3/3 \|", report, re.M), (w, e)
    for name in PLOTS:
        assert f"]({name})" in report
    assert "All 15 runs exact." in report and "trends" in report and "line rate" in report


def test_failing_point_is_recorded_and_exit_is_nonzero(tmp_path):
    fake = FakeRun(fail={(3, 1024): "raise"})
    rc, out, log = run(tmp_path, fake)
    assert rc == 1
    rows = read_csv(out / "runs.csv")
    assert len(rows) == 15, "the sweep must go on after a failure"
    bad = [r for r in rows if r["workers"] == "3"]
    assert len(bad) == 3 and all(r["ok"] == "False" and r["exact"] == "False" for r in bad)
    assert all("RuntimeError: switch s1 did not start" in r["error"] for r in bad)
    summary = {(s["workers"], s["elements"]): s for s in read_csv(out / "summary.csv")}
    assert summary[("3", "1024")]["errors"] == "3" and summary[("3", "1024")]["seconds_median"] == ""
    assert summary[("2", "1024")]["exact"] == "3"
    report = (out / "report.md").read_text()
    assert "12 of 15 planned runs exact" in report
    assert report.count("RuntimeError: switch s1 did not start") == 3
    assert "FAILED after" in log and "12/15 runs exact" in log
    for name in PLOTS:
        assert (out / name).exists()


@pytest.mark.parametrize("mode, error", [
    ("inexact", ""),
    ("missing", "result lacks keys: seconds"),
    ("checker", "rank 1: timed out; rank 2: gone"),
])
def test_bad_results_make_the_exit_nonzero(tmp_path, mode, error):
    rc, out, log = run(tmp_path, FakeRun(fail={(4, 256): mode}))
    assert rc == 1
    bad = [r for r in read_csv(out / "runs.csv") if (r["workers"], r["elements"]) == ("4", "256")]
    assert len(bad) == 3 and all(r["exact"] == "False" and error in r["error"] for r in bad)
    report = (out / "report.md").read_text()
    assert "12 of 15 planned runs exact" in report
    if mode == "inexact":
        assert "NOT EXACT (max abs error 3)" in log and "max abs error 3" in report


def test_interrupt_still_writes_results(tmp_path):
    rc, out, _ = run(tmp_path, FakeRun(fail={(3, 1024): "interrupt"}))
    assert rc == 130
    assert len(read_csv(out / "runs.csv")) == 1
    assert "interrupted" in (out / "report.md").read_text()


def test_cli_overrides_name_backend_repeats(tmp_path):
    fake = FakeRun()
    log = io.StringIO()
    rc = main(["--config", str(write_config(tmp_path)), "--out", str(tmp_path / "r"), "--name", "other",
               "--backend", "bmv2", "--repeats", "1"], run_fn=fake, log=log)
    assert rc == 0 and len(fake.calls) == len(POINTS)
    assert {c["backend"] for c in fake.calls} == {"bmv2"}
    assert (tmp_path / "r" / "other" / "report.md").exists()
    assert yaml.safe_load((tmp_path / "r" / "other" / "config.yaml").read_text())["backend"] == "bmv2"


def test_dry_run_runs_nothing(tmp_path):
    def explode(**_):
        raise AssertionError("dry run must not run anything")
    log = io.StringIO()
    assert main(["--config", str(write_config(tmp_path)), "--out", str(tmp_path), "--dry-run"],
                run_fn=explode, log=log) == 0
    assert "[15/15]" in log.getvalue() and not (tmp_path / "t").exists()


def test_missing_emulator_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "emulation.session", None)   # makes the lazy import fail
    log = io.StringIO()
    rc = main(["--config", str(write_config(tmp_path)), "--out", str(tmp_path)], log=log)
    assert rc == 2 and "emulation.session" in log.getvalue()


@pytest.mark.parametrize("change, key", [
    ({"repeats": 0}, "repeats"),
    ({"repeats": True}, "repeats"),
    ({"backend": "tofino"}, "backend"),
    ({"dtype": "int8"}, "dtype"),
    ({"loss": 1.5}, "loss"),
    ({"window": 0}, "window"),
    ({"name": "../escape"}, "name"),
    ({"reapeats": 2}, "reapeats"),
    ({"sweep": [2, 3]}, "sweep"),
    ({"sweep": {"workers": [2, "4"], "elements": [8]}}, "sweep.workers[1]"),
    ({"sweep": {"workers": [1, 2], "elements": [8]}}, "sweep.workers[0]"),
    ({"sweep": {"workers": [2, 2], "elements": [8]}}, "sweep.workers"),
    ({"sweep": {"workers": [2], "elements": []}}, "sweep.elements"),
    ({"sweep": {"workers": [2], "elements": [8], "size": [1]}}, "sweep.size"),
    ({"fixed": {"elements": 1024}}, "fixed.workers"),
    ({"fixed": {"elements": 1024, "workers": 99}}, "fixed.workers"),
])
def test_config_errors_name_the_key(change, key):
    with pytest.raises(ConfigError) as info:
        parse_config({**BASE, **change}, source="exp.yaml")
    assert info.value.key == key
    assert f"key '{key}'" in str(info.value) and str(info.value).startswith("exp.yaml: ")


def test_bad_config_file_exits_2_with_the_key(tmp_path):
    log = io.StringIO()
    assert main(["--config", str(write_config(tmp_path, repeats="two")), "--out", str(tmp_path)],
                run_fn=FakeRun(), log=log) == 2
    assert "key 'repeats'" in log.getvalue() and "'two'" in log.getvalue()
    broken = tmp_path / "broken.yaml"
    broken.write_text("sweep: [unclosed\n")
    assert main(["--config", str(broken)], run_fn=FakeRun(), log=log) == 2
    assert "not valid YAML" in log.getvalue()
    with pytest.raises(ConfigError, match="did you mean 'repeats'"):
        parse_config({**BASE, "reapeats": 2})


def test_shipped_configs_are_valid_and_within_budget():
    default, quick = load_config(CONFIGS / "default.yaml"), load_config(CONFIGS / "quick.yaml")
    assert default.sweep_workers == (2, 3, 4, 5, 6, 7, 8) and default.fixed_workers == 8
    assert len(default.sweep_elements) >= 3 and 15 <= len(default.plan()) <= 24
    # 3 s set-up + 4 s per 8-worker 1M-element allreduce: "well under 10 minutes" on 2 cores.
    assert default.estimate_seconds() < 300
    assert quick.name == "quick" and len(quick.plan()) <= 5 and quick.estimate_seconds() < 30


def test_long_errors_keep_their_last_line(tmp_path):
    def traceback_like(**_):
        raise RuntimeError("switch s1 exited; log tail:\n" + "  File x.py, line 1\n" * 100 + "ImportError: no foo")
    log = io.StringIO()
    assert main(["--config", str(write_config(tmp_path, repeats=1)), "--out", str(tmp_path)],
                run_fn=traceback_like, log=log) == 1
    errors = [r["error"] for r in read_csv(tmp_path / "t" / "runs.csv")]
    assert all(e.startswith("RuntimeError: switch s1 exited") and e.endswith("ImportError: no foo") for e in errors)
    assert all(len(e) <= 600 and "\n" not in e for e in errors)
