"""`agglab train --model mlp`: data-parallel training through the emulated switches,
compared with the same training in one process.

Every worker host runs hosts/train_worker.py (one rank, gradients allreduced every step
through hosts/communicator.py); this module starts them in a Session, runs the
one-process reference (hosts/mlp.py `train_single_process`) on the same data and seed, and
compares: identical parameters with int32 fixed-point gradients (exact aggregation), the
test accuracy within 2 points with float32 (the switch's float path rounds; hosts/mlp.py
states the per-step bound).
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict
from pathlib import Path

import numpy as np

from agglab.controller.trees import SWITCH_TREES
from agglab.emulation.session import Session
from agglab.ground.runspec import RunSpec
from agglab.hosts import communicator
from agglab.hosts.mlp import Config, MLP, train_single_process
from agglab.pace.fusion import CostModel
from agglab.pace.schedule import MiB

FLOAT_ACCURACY_POINTS = 0.02


def check_train_spec(spec: RunSpec, cfg: Config) -> None:
    """One clear line for what `agglab train` cannot run."""
    if spec.algorithm not in communicator.RUNNERS:
        raise ValueError(f"--algorithm {spec.algorithm} has no allreduce in this build "
                         f"(have: {', '.join(sorted(communicator.RUNNERS))})")
    if spec.tree not in SWITCH_TREES:
        raise ValueError(f"agglab train runs on switch trees ({', '.join(SWITCH_TREES)}), not --tree {spec.tree}")
    if cfg.steps < 1 or cfg.batch < 1 or not 0 < cfg.lr < float("inf"):      # nan is refused too
        raise ValueError("--steps, --batch and --lr must be positive")
    if not 0 < cfg.topk <= 1:
        raise ValueError(f"--topk must be a fraction within (0, 1], got {cfg.topk}")


def run_training(spec: RunSpec, cfg: Config, out_dir: Path, quiet: bool = True) -> dict:
    """Train through a fresh network, then in one process; return the comparison."""
    n_params = MLP(64, cfg.hidden, 10, cfg.seed).params.size
    spec = spec.with_(elements=n_params, dtype=cfg.dtype)
    check_train_spec(spec, cfg)
    out_dir.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    with Session(spec, quiet=quiet) as session:
        cfg_path = session.net.run.path / "train.json"
        cfg_path.write_text(json.dumps(asdict(cfg)))
        deadline = 120 + cfg.steps * (2 + spec.give_up * (1 if spec.loss or spec.fail else 0.2))
        reports, failures = session.run_program("agglab.hosts.train_worker", "train", (str(cfg_path),), deadline)
        events = session.events.lines()
    seconds = time.monotonic() - started
    reference = train_single_process(cfg)
    errors = [f"rank {r['rank']}: {r.get('error', 'failed')}" for r in reports if not r.get("ok")]
    result = {"ok": False, "workers": spec.workers, "algorithm": spec.algorithm, "dtype": cfg.dtype,
              "topk": cfg.topk, "loss": spec.loss, "topology": spec.topology, "tree": spec.tree,
              "steps": cfg.steps, "batch": cfg.batch, "lr": cfg.lr, "seed": cfg.seed, "seconds": round(seconds, 2),
              "single_process_accuracy": reference["final_accuracy"], "failures": failures,
              "single_process_curve": reference["curve"], "events": events}
    if errors:
        result["errors"] = errors
        return result
    params = [r.pop("result") for r in reports]
    diff = max(float(np.max(np.abs(p.astype(np.float64) - reference["params"]))) for p in params)
    ranks_agree = all(np.array_equal(params[0], p) for p in params[1:])
    accuracy = reports[0]["final_accuracy"]
    exact = cfg.dtype == "int32"
    result.update(
        final_accuracy=accuracy, max_abs_param_diff=diff, ranks_agree=ranks_agree, exact=exact,
        curve=reports[0]["curve"], allreduces=reports[0]["allreduces"],
        retransmissions=sum(r["retransmissions"] for r in reports),
        blocks_sent=sum(r["blocks_sent"] or r["blocks"] for r in reports),
        blocks=sum(r["blocks"] for r in reports),
        train_seconds=round(max(r["seconds"] for r in reports), 2),
        ok=ranks_agree and (diff == 0.0 if exact else abs(accuracy - reference["final_accuracy"])
                            <= FLOAT_ACCURACY_POINTS))
    result["cost"] = call_cost(reports[0].get("call_log") or [], spec)
    result["plot"] = str(plot_curves(result, out_dir / "train.png"))
    (out_dir / "train.json").write_text(json.dumps(result, indent=1, sort_keys=True))
    return result


def call_cost(call_log: list, spec: RunSpec) -> dict | None:
    """One rank's allreduce calls as alpha + beta*s beside the link model's (the emulated
    network's own units). Every step allreduces the same size, which cannot separate alpha
    from beta: beta is then the link model's and alpha what a call took beyond it."""
    if not call_log:
        return None
    sizes, secs = zip(*call_log)
    model = CostModel.for_network(spec.algorithm, spec.workers, spec.bw / 1e3, 0.0) if spec.bw else None
    try:
        fit = CostModel.fit(sizes, [s * 1e3 for s in secs], model.beta_ms_per_byte if model else None)
    except ValueError:
        return {"calls": len(call_log), "mean_ms": round(1e3 * sum(secs) / len(secs), 3)}
    out = {"calls": len(call_log), "alpha_ms": round(fit.alpha_ms, 4), "ms_per_mb": round(fit.beta_ms_per_byte * MiB, 4),
           "fitted": "alpha and beta" if len(set(sizes)) > 1 else "alpha (beta: the link model's)"}
    if model:
        out.update(model_alpha_ms=model.alpha_ms, model_ms_per_mb=round(model.beta_ms_per_byte * MiB, 4))
    return out


def plot_curves(result: dict, path: Path) -> Path:
    import matplotlib  # lazy: matplotlib, only plot_curves() needs it
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # lazy: matplotlib, only plot_curves() needs it

    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 3.6))
    for curve, label, style in ((result["curve"], f"{result['workers']} workers through the switches", "-"),
                                (result["single_process_curve"], "one process, same data and seed", "--")):
        steps = [c["step"] for c in curve]
        a.plot(steps, [c["train_loss"] for c in curve], style, marker=".", label=label)
        b.plot(steps, [c["test_accuracy"] for c in curve], style, marker=".", label=label)
    a.set(xlabel="step", ylabel="training loss (full training set)")
    b.set(xlabel="step", ylabel="test accuracy")
    a.legend(fontsize=8)
    fig.suptitle(f"MLP on digits: {result['algorithm']} ({result['dtype']}, top-k {result['topk']}), "
                 f"loss {result['loss']}, {result['topology']}; max |param diff| "
                 f"{result['max_abs_param_diff']:.3g}", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
