"""agglab/bench/bmv2.py's reporting: every build measured or named with its build command, the
ratio to the twin and the ceiling. The switch runs are replaced by fixed results here (the
real runs need root and BMv2: `make bench ONLY=bmv2`, tests/test_bench.py)."""

from __future__ import annotations

import pytest

from agglab.bench import bmv2
from agglab.bench.cli import parse_args
from agglab.controller import bmv2_tools


def test_ceiling_is_the_link_rate_whose_wire_time_matches_the_switch():
    # 8,000 frames/s over 8 workers: 1,000 completions/s, each one 314-byte frame per link each way
    assert bmv2.ceiling_mbps(8000, 8) == pytest.approx(1000 * 314 * 8 / 1e6)


def _fake_run(rates: dict):
    def run(mode, opts, start_switch):
        binary = getattr(start_switch, "keywords", {}).get("binary", "twin")
        fps = rates[binary]
        return {"completion_frames_pps": fps, "daemon_cpu": 1.0, "retx": 0, "bad": 0}
    return run


def test_a_missing_performance_build_is_one_line_with_its_build_command(monkeypatch, tmp_path, capsys):
    ref = tmp_path / "simple_switch"
    monkeypatch.setattr(bmv2, "installed_tool", lambda name: str(ref))
    monkeypatch.setattr(bmv2, "find_bmv2_tool", lambda name: str(tmp_path / name))
    monkeypatch.setattr(bmv2, "PERF_SWITCH", str(tmp_path / "absent" / "simple_switch"))
    monkeypatch.setattr(bmv2, "twin_calibrated_ceiling", lambda: None)
    monkeypatch.setattr(bmv2.bench_io, "run", _fake_run({"twin": 100_000, str(ref): 5_000}))
    figures = bmv2.bench_bmv2(parse_args(["--daemon-seconds", "1"]))
    lines = [line for line in capsys.readouterr().out.splitlines() if "not installed" in line]
    assert lines == [f"BMv2 performance build: not installed ({bmv2_tools.BUILD_PERF})"]
    assert [f["name"] for f in figures] == ["software twin aggregation frames/s (window 32)",
                                            "BMv2 reference build aggregation frames/s (window 32)"]
    assert figures[1]["value"] == 5_000 and figures[1]["ratio_to_twin"] == 0.05
    assert figures[1]["simple_switch"] == str(ref) and figures[1]["not_installed"] == lines


def test_both_builds_are_measured_and_scaled_from_the_twins_calibration(monkeypatch, tmp_path):
    ref, perf = tmp_path / "ref", tmp_path / "perf"
    perf.write_text("")
    perf.chmod(0o755)
    monkeypatch.setattr(bmv2, "installed_tool", lambda name: str(ref))
    monkeypatch.setattr(bmv2, "find_bmv2_tool", lambda name: str(tmp_path / name))
    monkeypatch.setattr(bmv2, "PERF_SWITCH", str(perf))
    monkeypatch.setattr(bmv2, "twin_calibrated_ceiling", lambda: 20.0)
    monkeypatch.setattr(bmv2.bench_io, "run", _fake_run({"twin": 100_000, str(ref): 4_000,
                                                               str(perf): 6_000}))
    figures = bmv2.bench_bmv2(parse_args(["--daemon-seconds", "1"]))
    by_name = {f["name"].split(" aggregation")[0]: f for f in figures}
    assert set(by_name) == {"software twin", "BMv2 reference build", "BMv2 performance build"}
    assert by_name["BMv2 performance build"]["ratio_to_twin"] == 0.06
    assert by_name["BMv2 reference build"]["calibrated_ceiling_mbps"] == pytest.approx(0.8)   # 20 x 0.04
    assert by_name["BMv2 performance build"]["not_installed"] == []
