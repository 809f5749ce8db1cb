"""`python -m agglab.experiments` / `agglab experiment`: run a suite or one trend definition.

Exit status: 0 every run ok, 1 some run failed, 2 unusable definition or no emulator,
128 + signal when stopped by SIGINT (130), SIGTERM (143) or SIGHUP (129): the run in progress
cleans up, every finished run is kept, the report is written, and rerunning resumes.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import TextIO

from agglab.emulation.fidelity import ceiling_for, ceiling_for_shape
from agglab.emulation.wire_model import BoundError, wire_seconds
from agglab.experiments.analysis import claim_bound
from agglab.experiments.definition import ConfigError
from agglab.experiments.where import curves
from agglab.experiments.runner import TURN_WAIT, network_turn
from agglab.ground import wire
from agglab.ground.cluster_file import ClusterFileError, load
from agglab.ground.interrupts import arm, interrupted_line, signum_of
from agglab.ground import netlease
from agglab.ground.netlease import NetworkBusy
from agglab.ground.oneline_parser import OneLineParser
from agglab.experiments.runner import (RunFn, SetupError, estimate_seconds, load_suite, needs_calibration, plan,
                                results_name, run_suite)
from agglab.experiments.shapes import (calibrate_args, calibrate_seconds, faithless_shapes, key_of, shape_switches,
                               uncalibrated_shapes)

CONFIGS = Path(__file__).resolve().parent / "configs"


def resolve(config: str) -> Path:
    """A path, or a suite name under experiments/configs (`quick` -> configs/quick.yaml)."""
    path = Path(config)
    if not path.exists() and not config.endswith((".yaml", ".yml")) and (CONFIGS / f"{config}.yaml").exists():
        return CONFIGS / f"{config}.yaml"
    return path


def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog="agglab experiment", description=(
        "Run trend definitions (experiments/*.yaml) or a suite of them (experiments/configs/*.yaml) "
        "on the emulator at a scale under this machine's fidelity ceiling, and write "
        "OUT/NAME/report.md with each trend beside the paper's claim. Resumes: finished runs "
        "recorded in OUT/NAME/runs.jsonl are skipped."))
    p.add_argument("config", nargs="?", help="definition or suite file, or a suite name (default, quick, bmv2, "
                   "paper); default: the backend's default suite (" +
                   ", ".join(f"{b}: {s}" for b, s in DEFAULT_SUITE.items()) + ")")
    p.add_argument("--config", dest="config_opt", help="same as the positional argument")
    p.add_argument("--name", help="output directory name (default: the suite's name)")
    p.add_argument("--repeats", type=int, help="override every definition's repeats")
    p.add_argument("--out", type=Path, default=Path("results"), help="results root (default: %(default)s)")
    p.add_argument("--backend", choices=["soft", "bmv2"], help="data plane of every run (default: each definition's); "
                   "the suite runs at that backend's calibrated ceiling; on BMv2 each trend at its own shape's, and every "
                   "missing calibration (the default, each trend shape) is measured first, "
                   "and results go to OUT/NAME-bmv2")
    p.add_argument("--cluster", metavar="FILE", help="run every network on the servers of this cluster file "
                   "(docs/guide/cluster.md)")
    p.add_argument("--dry-run", action="store_true", help="print the plan and its time estimate, run nothing")
    p.add_argument("--fresh", action="store_true", help="discard OUT/NAME/runs.jsonl instead of resuming")
    return p


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    return build_parser().parse_args(argv)


def _print_bounds(suite, log: TextIO, topo_dir: Path) -> None:
    """Every claim's paper figure beside this network's bound (experiments/bounds.py), before
    anything runs: what the report's "bound" column will hold."""
    print("claims: paper figure / this network's bound", file=log)
    for d in suite.definitions:
        for c, _ in d.claims():
            value, why = claim_bound([], d, c)
            shown = f"{value:.3g}" if value == value else f"– ({why})"
            print(f"  {d.name}: {c.text}: paper {c.paper:.3g}, bound {shown}", file=log)
    found = [c for d in suite.definitions for c in curves(d, topo_dir)]
    if found:
        print("where the paper's figure appears (the bound swept over a knob; experiments/where.py):", file=log)
    for c in found:
        print(f"  {c.trend}: {c.claim}: {', '.join(f'{v}: {b:.3g}' for v, b, _ in c.points)}; {c.verdict()}", file=log)


def _emulated(d, p) -> str:
    """What a planned point runs: its emulated gradient, fastest link rate and wire time
    (emulation/wire_model.py), so a per-scale plan shows each size's own scale."""
    if p.spec is None or p.program or p.scale is None:
        return ""
    try:
        wire_s = f", wire {wire_seconds(p.spec):.1f} s"
    except (BoundError, ValueError, KeyError):
        wire_s = ""
    return f": {p.spec.elements} x {p.spec.dtype} at {p.scale.link_mbps(d.fastest_link()):.3g} Mb/s{wire_s}"


HOLDING: dict[str, bool] = {}     # "alone": _main took the machine's lease alone


def main(argv: list[str] | None = None, run_fn: RunFn | None = None, log: TextIO = sys.stderr,
         calibrate_fn=None) -> int:
    previous = arm()             # SIGTERM and SIGHUP unwind like Ctrl-C (ground/interrupts.py)
    try:
        return _main(argv, run_fn, log, calibrate_fn)
    finally:
        if HOLDING.pop("alone", False):     # its figures had the CPU alone (ground/netlease.py)
            netlease.release()
        for sig, handler in previous.items():
            signal.signal(sig, handler)


# The suite `make experiment` / `agglab experiment` runs when none is named, per backend.
DEFAULT_SUITE = {"soft": "default", "bmv2": "bmv2"}
# How long `agglab calibrate --backend bmv2` takes on the 2-core machine: 22 s for its 4 probes
# on 2026-12-06 (docs/guide/experiments.md "Backends"); a search that steps down takes longer
CALIBRATE_TIME = "about a minute"


def calibrate_backend(backend: str, shape: dict | None = None) -> int:
    """`agglab calibrate --backend BACKEND` (with `shape`, that trend shape's options,
    experiments/shapes.py) in a child process (its probes print as they finish), holding the
    network turn (AGGLAB_NET_LOCK) for its whole search as the docs' `flock` does. A child,
    not an import: the calibration command is the CLI's, one layer with this package."""
    with network_turn():
        return subprocess.run([sys.executable, "-m", "agglab", "calibrate", "--backend", backend,
                               *(calibrate_args(shape) if shape else [])]).returncode


def calibrate_first(backend: str, calibrate_fn, log: TextIO, shape: dict | None = None,
                    trends: list[str] | None = None) -> int:
    """Calibrate a backend that has no ceiling before its first suite: what `make experiment
    BACKEND=bmv2` on a fresh clone should do (the soft backend's 5 Mb/s default flags half of
    BMv2's runs CPU-bound); with `shape`, that trend shape (experiments/shapes.py: a
    leaf-spine, BCube or fat-tree, the sparse pipeline, more than 8 workers). One line before
    and one after with its time. 0 when a ceiling was stored, else 2 with the command to retry."""
    command = f"agglab calibrate --backend {backend}" + (" " + " ".join(calibrate_args(shape)) if shape else "")
    key = key_of(shape) if shape else None
    what = f"shape {key} ({', '.join(trends or [])})" if shape else "8 workers on one switch"
    took = f"~{calibrate_seconds(shape, shape_switches(shape)):.0f} s" if shape else CALIBRATE_TIME
    print(f"no {backend} calibration for {what} yet: calibrating it first ({took} on a "
          f"2-core machine; `{command}` does it alone)", file=log, flush=True)
    started = time.monotonic()
    if shape:
        calibrate_fn(backend, shape)
    else:
        calibrate_fn(backend)
    found = ceiling_for_shape(key, backend) if shape else (ceiling_for(1, backend) or [None])[0]
    if found is None:
        if shape:
            print(f"warning: calibrating {backend} for {what} found no faithful rate (is the machine busy?); "
                  f"retry with `sudo .venv/bin/{command}`", file=log)
        else:
            print(f"error: calibrating {backend} for {what} found no faithful rate (is the machine busy?); "
                  f"nothing ran. Retry with `sudo .venv/bin/{command}`", file=log)
        return 2
    print(f"{backend} ceiling for {key or 'single-w8'}: {found:g} Mb/s per link "
          f"(calibrated in {time.monotonic() - started:.0f} s)", file=log, flush=True)
    return 0


def calibrate_shapes(suite, calibrate_fn, log: TextIO) -> int:
    """Every trend shape of a BMv2 suite that has no calibration yet, one after the other. A
    shape with no faithful rate on this machine (BMv2's 20-switch k=4 fat-tree on 2 cores) does
    not stop the suite: its trends run at the suite's ceiling, and the fidelity check flags the
    runs that were CPU-bound, as it did before shapes were calibrated."""
    for _, shape, trends in uncalibrated_shapes(suite):
        if calibrate_first(suite.backend, calibrate_fn, log, shape, trends):
            print(f"  {', '.join(trends)}: run at the suite's ceiling; runs that are CPU-bound there are flagged",
                  file=log, flush=True)
    return 0


def warn_faithless(suite, log: TextIO) -> None:
    """One line per trend shape whose stored search found no faithful rate: its trends run at
    the suite's ceiling and their CPU-bound runs are flagged; the command to search again."""
    for key, record, trends in faithless_shapes(suite):
        lowest = min((p["rate_mbps"] for p in record.get("probes") or []), default=None)
        searched = f"searched {record.get('when', '?')}" + (f", down to {lowest:g} Mb/s" if lowest else "")
        print(f"  warning: {suite.backend} shape {key} ({', '.join(trends)}) has no faithful rate on this machine "
              f"({searched}): run at the suite's ceiling, CPU-bound runs flagged; "
              f"`agglab calibrate --backend {suite.backend} {' '.join(calibrate_args(record.get('shape') or {}))}` "
              "searches again", file=log, flush=True)


def dry_run_calibrations(suite, log: TextIO) -> float:
    """What a real run would calibrate first, with each shape's estimate: the cost in sight
    (its seconds, returned for the plan's total)."""
    todo = uncalibrated_shapes(suite)
    if not todo:
        return 0.0
    costs = [calibrate_seconds(shape, shape_switches(shape)) for _, shape, _ in todo]
    print(f"  {len(todo)} {suite.backend} trend shape(s) without a calibration: a real run calibrates each "
          f"first, ~{sum(costs) / 60:.0f} min in all on a 2-core machine:", file=log)
    for (key, shape, trends), cost in zip(todo, costs):
        print(f"    {key} ({', '.join(trends)}): ~{cost:.0f} s, `agglab calibrate --backend {suite.backend} "
              f"{' '.join(calibrate_args(shape))}`", file=log)
    return sum(costs)


def _main(argv: list[str] | None, run_fn: RunFn | None, log: TextIO, calibrate_fn=None) -> int:
    args = parse_args(argv)
    config = args.config_opt or args.config or DEFAULT_SUITE.get(args.backend or "soft", "default")
    try:
        suite = load_suite(resolve(config), args.repeats, args.backend)
        if needs_calibration(suite.backend) and (run_fn is None or calibrate_fn) and not args.dry_run:
            code = calibrate_first(suite.backend, calibrate_fn or calibrate_backend, log)
            if code:
                return code
            suite = load_suite(resolve(config), args.repeats, args.backend)
        if uncalibrated_shapes(suite) and (run_fn is None or calibrate_fn) and not args.dry_run:
            code = calibrate_shapes(suite, calibrate_fn or calibrate_backend, log)   # each trend's own
            if code:
                return code
        if args.cluster:
            try:
                load(args.cluster)
            except ClusterFileError as exc:
                raise ConfigError("--cluster", args.cluster, str(exc)) from None
            for d in suite.definitions:
                d.run["cluster"] = str(Path(args.cluster).resolve())
        if args.name is not None and (not args.name or os.sep in args.name or args.name in (".", "..")):
            raise ConfigError("--name", repr(args.name), "a directory name under --out, not a path")
        out_dir = args.out / results_name(args.name or suite.name, wire.K, suite.backend)
        steps = plan(suite, out_dir)            # writes OUT/NAME/topologies/ (the generated shapes)
    except ConfigError as exc:
        print(f"error: {exc}", file=log)
        return 2
    except OSError as exc:                      # --out names no directory we may write
        print(f"error: --out {args.out}: {exc.filename or ''}: {exc.strerror or exc}", file=log)
        return 2
    if run_fn is None and not args.dry_run:   # the machine alone, or one line (ground/netlease.py)
        try:
            netlease.acquire(out_dir, alone=True)
        except NetworkBusy as exc:
            print(f"agglab experiment: {exc}", file=log)
            return exc.exit_code
        HOLDING["alone"] = True
    warn_faithless(suite, log)
    estimates = [estimate_seconds(p, len(reps)) for _, p, reps in steps]     # each a wire model's work: once
    est = sum(estimates)
    runs = sum(len(reps) for _, _, reps in steps)
    print(f"{suite.name}: {len(suite.definitions)} trend(s), {runs} runs, estimated {est / 60:.1f} min "
          f"at a ceiling of {suite.ceiling_mbps:g} Mb/s per link ({suite.ceiling_source}) -> {out_dir}/",
          file=log, flush=True)
    if args.dry_run:
        first = 0.0
        if needs_calibration(suite.backend):
            print(f"  ({suite.backend} is not calibrated: a real run calibrates it first, "
                  f"{CALIBRATE_TIME}; the plan above is at the default)", file=log)
            first = 60.0
        first += dry_run_calibrations(suite, log)
        if first:
            print(f"  in all: ~{(est + first) / 60:.0f} min with the calibrations", file=log)
        for (d, p, reps), seconds in zip(steps, estimates):
            what = p.error or f"~{seconds:.0f} s{_emulated(d, p)}"
            print(f"  {d.name}: {p.label()} x{len(reps)} ({what})", file=log)
        _print_bounds(suite, log, out_dir / "topologies")
        return 0
    if run_fn is None and os.geteuid() != 0:
        print("error: experiments build Mininet networks and need root: run with sudo", file=log)
        return 2
    if args.fresh and (out_dir / "runs.jsonl").exists():
        (out_dir / "runs.jsonl").unlink()
    try:
        outcome = run_suite(suite, out_dir, run_fn, log)
    except SetupError as exc:
        print(f"error: {exc}", file=log)
        return 2
    except KeyboardInterrupt as exc:          # before any run started (set-up, first import)
        print(interrupted_line("experiment", signum_of(exc), "everything it started was stopped and "
                               "removed; no run had finished"), file=log, flush=True)
        return 128 + signum_of(exc)
    from agglab.experiments.report import write_report  # lazy: loads matplotlib, only _main() needs it

    write_report(outcome)
    ok = sum(1 for r in outcome.rows if r.get("ok"))
    waited = f", {TURN_WAIT['seconds']:.0f} s of it waiting for the network turn" if TURN_WAIT["seconds"] >= 1 else ""
    print(f"{ok}/{len(outcome.rows)} runs ok ({outcome.ran} ran now in {outcome.finished - outcome.started:.0f} s{waited}, "
          f"{outcome.skipped} kept from before); "
          f"report: {out_dir / 'report.md'}", file=log)
    if outcome.interrupted:
        print(interrupted_line("experiment", outcome.interrupted, f"everything it started was stopped and "
                               f"removed; finished runs are kept in {out_dir / 'runs.jsonl'}: rerun to resume"),
              file=log, flush=True)
        return 128 + outcome.interrupted
    return 0 if ok == len(outcome.rows) else 1
