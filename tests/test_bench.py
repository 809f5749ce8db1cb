"""agglab/bench.py: the figures it writes carry their target, link rate, scale and link-boundness."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from agglab import bench
from ground.paths import REPO


def test_analytic_wire_time_of_one_million_int32_at_5_mbps():
    # 15,625 frames of 14 + 20 + 8 + 16 + 64*4 = 314 bytes each way, at 5 Mb/s
    assert bench.wire_seconds(1_000_000, 5.0) == pytest.approx(15_625 * 314 * 8 / 5e6)
    assert bench.wire_seconds(65, 1.0) == pytest.approx(2 * 314 * 8 / 1e6)   # a partial packet counts


def test_a_run_writes_json_and_compares_with_the_previous(tmp_path):
    first, second = tmp_path / "a.json", tmp_path / "b.json"
    run = [sys.executable, "-m", "agglab.bench", "--only", "pipeline"]
    subprocess.run(run + ["--out", str(first)], cwd=REPO, check=True, capture_output=True, timeout=300)
    report = json.loads(first.read_text())
    assert {"time", "cpus", "load_average", "commit"} <= set(report)
    names = [f["name"] for f in report["figures"]]
    assert names == ["pipeline dense", "pipeline sparse (density 0.2)"]
    for f in report["figures"]:
        assert f["value"] > 0 and f["unit"] == "packets/s" and f["scale"] and f["link_bound"] is False
    out = subprocess.run(run + ["--out", str(second), "--compare", str(first)], cwd=REPO, check=True,
                         capture_output=True, text=True, timeout=300).stdout
    assert out.count(" was ") == 2 and "written to" in out


@pytest.mark.parametrize("args", [["--only", "nothing"], ["--rates", "5,x"], ["--wide-rates", "0"],
                                  ["--compare", "/nonexistent.json"]])
def test_bad_arguments_exit_2_with_one_line(args):
    res = subprocess.run([sys.executable, "-m", "agglab.bench", *args], cwd=REPO, capture_output=True,
                         text=True, timeout=60)
    assert res.returncode == 2
    assert len(res.stderr.strip().splitlines()) == 1 and "agglab bench" in res.stderr


@pytest.mark.root
@pytest.mark.mininet
def test_the_wide_section_runs_the_256_value_variant(tmp_path):
    out = tmp_path / "wide.json"
    subprocess.run([sys.executable, "-m", "agglab.bench", "--only", "wide", "--elements", "25600",
                    "--wide-rates", "50", "--out", str(out)], cwd=REPO, check=True, capture_output=True,
                   timeout=240)
    report = json.loads(out.read_text())
    assert report["skipped"] == [] and report["values_per_packet"] == 64      # the parent's variant
    (f,) = report["figures"]
    assert f["name"] == "8 x 25,600 int32 at 50 Mb/s, K=256" and f["section"] == "wide"
    assert f["target"] is None and f["exact"] is True and "256 per packet" in f["scale"]
    # 100 frames of 14 + 20 + 8 + 16 + 256 * 4 = 1082 bytes each way at 50 Mb/s
    assert f["analytic_s"] == pytest.approx(100 * 1082 * 8 / 50e6, abs=1e-3)
