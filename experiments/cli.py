"""Command line of the experiments: `python -m experiments [--config PATH] ...`.

Why exit statuses matter here: `make experiment` and CI use the status to tell a
clean sweep (0) from one where some run failed or was not exact (1), an
unusable config or missing emulator (2), and an interrupted sweep (130).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TextIO

from experiments.config import BACKENDS, ConfigError, estimate_run_seconds, load_config
from experiments.runner import RunFn, SetupError, run_experiment

DEFAULT_CONFIG = Path(__file__).resolve().parent / "configs" / "default.yaml"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m experiments", description=(
        "Run an allreduce sweep on the emulator and write runs.csv, summary.csv, plots and "
        "report.md to OUT/NAME/. Exit status 1 if any run failed or was not exact."))
    p.add_argument("--config", type=Path, default=DEFAULT_CONFIG, help="YAML config (default: %(default)s)")
    p.add_argument("--name", help="override the config's name (the output directory)")
    p.add_argument("--backend", choices=BACKENDS, help="override the config's backend")
    p.add_argument("--repeats", type=int, help="override the config's repeats")
    p.add_argument("--out", type=Path, default=Path("results"), help="results root (default: %(default)s)")
    p.add_argument("--dry-run", action="store_true", help="print the plan and time estimate, run nothing")
    return p.parse_args(argv)


def main(argv: list[str] | None = None, run_fn: RunFn | None = None, log: TextIO = sys.stderr) -> int:
    """CLI entry: 0 all runs exact, 1 some run failed or inexact, 2 unusable config, 130 Ctrl-C."""
    args = parse_args(argv)
    try:
        cfg = load_config(args.config, {"name": args.name, "backend": args.backend, "repeats": args.repeats})
    except ConfigError as exc:
        print(f"error: {exc}", file=log)
        return 2
    out_dir = args.out / cfg.name
    plan = cfg.plan()
    print(f"{cfg.name}: {len(cfg.points())} points x {cfg.repeats} repeats = {len(plan)} runs on "
          f"backend {cfg.backend}, estimated <= {cfg.estimate_seconds() / 60:.1f} min -> {out_dir}/",
          file=log, flush=True)
    if args.dry_run:
        for n, (repeat, point) in enumerate(plan, start=1):
            print(f"[{n}/{len(plan)}] {point.label()} rep={repeat + 1} (~{estimate_run_seconds(point):.1f} s)",
                  file=log)
        return 0
    try:
        outcome = run_experiment(cfg, out_dir, run_fn, log)
    except SetupError as exc:
        print(f"error: {exc}", file=log)
        return 2
    took = outcome.finished - outcome.started
    print(f"{outcome.exact_runs}/{len(outcome.rows)} runs exact in {took:.1f} s; "
          f"report: {out_dir / 'report.md'}", file=log)
    if outcome.interrupted:
        return 130
    return 0 if outcome.all_exact else 1
