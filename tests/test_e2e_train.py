"""`agglab train` end to end in Mininet: the digits MLP trained through the switches must
compute exactly the parameters of the one-process run (int32 fixed-point gradients), also
with packet loss and with a link failure mid-training; the profile mode runs both
schedulers' transfers through the network."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from agglab.ground.paths import REPO
from agglab.ground.runspec import RunSpec
from tests.leftovers import assert_clean

pytestmark = [pytest.mark.root, pytest.mark.mininet]


def train(tmp_path, steps=40, **spec):
    from agglab.emulation.training import run_training
    from agglab.hosts.mlp import Config

    s = RunSpec(**spec).validate()
    result = run_training(s, Config(workers=s.workers, steps=steps, eval_every=10), tmp_path)
    assert_clean()
    return result


def assert_identical(r):
    assert r["ok"], r.get("errors", r)
    assert r["max_abs_param_diff"] == 0.0 and r["ranks_agree"]
    assert r["curve"] == r["single_process_curve"]
    assert r["curve"][-1]["train_loss"] < r["curve"][0]["train_loss"]


@pytest.mark.parametrize("workers", [2, 4])
def test_loss_curve_identical_to_one_process(tmp_path, workers):
    assert_identical(train(tmp_path, workers=workers))


@pytest.mark.net_timeout(400)
@pytest.mark.parametrize("workers", [2, 4])
def test_identical_with_five_percent_loss(tmp_path, workers):
    r = train(tmp_path, steps=30, workers=workers, loss=0.05)
    assert_identical(r)
    assert r["retransmissions"] > 0


@pytest.mark.net_timeout(400)
@pytest.mark.parametrize("workers", [2, 4])
def test_identical_across_a_link_failure_mid_training(tmp_path, workers):
    r = train(tmp_path, workers=workers, topology="fattree", k=4, fail=["tree@0.5"])
    assert_identical(r)
    assert len(r["failures"]) == 1 and r["failures"][0]["on_tree"]


@pytest.mark.net_timeout(400)
@pytest.mark.parametrize("algorithm,topk", [("ring", 1.0), ("ps", 1.0), ("omnireduce", 0.25)],
                         ids=["ring", "ps", "omnireduce-topk"])
def test_cli_trains_with_every_algorithm(tmp_path, algorithm, topk):
    """`agglab train --algorithm ring|ps` (the hosts' baselines over TCP, switches only
    forward) and `--algorithm omnireduce --topk 0.25` (top-k blocks into the sparse
    pipeline, error feedback): the same parameters as the one-process run with the same top-k."""
    out = subprocess.run([sys.executable, "-m", "agglab", "train", "--workers", "4", "--model", "mlp",
                          "--dataset", "digits", "--algorithm", algorithm, "--topk", str(topk), "--steps", "15",
                          "--out", str(tmp_path), "--json"],
                         capture_output=True, text=True, cwd=REPO, timeout=360)
    assert out.returncode == 0, out.stderr[-2000:]
    r = json.loads(out.stdout)
    assert r["ok"] and r["algorithm"] == algorithm and r["topk"] == topk and r["steps"] == 15
    assert r["max_abs_param_diff"] == 0.0 and r["final_accuracy"] == r["single_process_accuracy"]
    # No traffic assertion for top-k: the MLP's 2,410 parameters are 38 K-blocks, no more than
    # the window, so every block heads its slot's column and travels in the sparse protocol
    # (hosts/sparse_blocks.py `announcements`); top-k saves traffic only on far larger arrays.
    assert_clean()


def test_cli_json_keys(tmp_path):
    out = subprocess.run([sys.executable, "-m", "agglab", "train", "--workers", "2", "--model", "mlp",
                          "--dataset", "digits", "--steps", "10", "--out", str(tmp_path), "--json"],
                         capture_output=True, text=True, cwd=REPO, timeout=240)
    assert out.returncode == 0, out.stderr
    r = json.loads(out.stdout)
    for key in ("ok", "final_accuracy", "single_process_accuracy", "max_abs_param_diff", "steps", "seconds"):
        assert key in r
    assert r["steps"] == 10 and r["max_abs_param_diff"] == 0.0
    assert (tmp_path / "train.png").exists()
    assert_clean()


@pytest.mark.net_timeout(400)
def test_profile_through_the_emulator(tmp_path):
    from agglab.emulation.pace_run import PaceOptions, run_profile

    spec = RunSpec(workers=2, bw=20.0).validate()
    r = run_profile(spec, "resnet50", ["fifo", "pace"], PaceOptions(emulated_mb=0.5), tmp_path)
    assert r["ok"], r.get("errors")
    assert r["scale"] == 500.0                      # 10 Gb/s modelled over 20 Mb/s links
    assert set(r["iteration_ms"]) == {"fifo", "pace"}
    for s, ms in r["iteration_ms"].items():         # never faster than compute alone
        assert ms >= r["compute_ms"]
    # one set of worker processes served the calibration and both plans (a persistent communicator)
    assert r["replay_served"] == 3
    # alpha and beta as measured and as modelled (10 Gb/s: 8 / 10e9 s per byte = 0.8389 ms/MiB)
    assert r["emulated_cost"]["ms_per_mb"] > 0 and r["model_cost"]["ms_per_mb"] == pytest.approx(0.8389, abs=1e-3)
    assert r["measured_cost_speedup"] == pytest.approx(r["planned_iteration_ms"]["fifo"] / r["planned_iteration_ms"]["pace"],
                                                       abs=1e-3)
    trace = json.loads(open(r["trace"]).read())
    pids = {e["pid"] for e in trace["traceEvents"] if e["ph"] == "X"}
    assert len(pids) == 2 + 2 * 2                   # two model runs, two workers per emulated run
    assert_clean()
