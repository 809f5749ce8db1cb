"""`agglab train` without a network: the pure PACE model's JSON, and one clear line with
exit 2 for bad input."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from ground.paths import REPO


def agglab(*args, tmp_path):
    return subprocess.run([sys.executable, "-m", "agglab", "train", *args, "--out", str(tmp_path)],
                          capture_output=True, text=True, cwd=REPO, timeout=120)


def test_profile_only_pure_model_json(tmp_path):
    out = agglab("--model", "resnet50", "--profile-only", "--no-network", "--scheduler", "pace",
                 "--workers", "8", "--json", tmp_path=tmp_path)
    assert out.returncode == 0, out.stderr
    r = json.loads(out.stdout)
    assert r["ok"] and r["scheduler"] == "pace" and r["scale"] is None
    assert r["iteration_ms"] == r["model_iteration_ms"]["pace"] >= r["compute_ms"]
    assert json.loads(open(r["trace"]).read())["traceEvents"]


@pytest.mark.parametrize("args, message", [
    (["--model", "alexnet", "--profile-only", "--no-network"], "no profile 'alexnet'"),
    (["--model", "resnet50", "--profile-only", "--no-network", "--partition-mb", "0"], "--partition-mb must be positive"),
    (["--model", "resnet50", "--profile-only", "--no-network", "--algorithm", "nccl"], "--algorithm must be one of"),
    (["--pcap"], "--pcap writes per-port pcaps into the kept run directory: give --keep DIR too"),
    (["--topology", "single", "--fail", "tree@0.5"], "--fail tree@0.5: nothing to reroute around"),
    (["--topology", "fattree", "--k", "5"], "k must be an even number"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, args, message):
    out = agglab(*args, tmp_path=tmp_path)
    assert out.returncode == 2
    assert message in out.stderr and len(out.stderr.strip().splitlines()) == 1, out.stderr
