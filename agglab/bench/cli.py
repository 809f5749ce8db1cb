"""`python -m agglab.bench` (`make bench`): the options, the run over the sections and the JSON it writes.

Why apart from the sections: this is what every run shares, whichever sections it names: the
options of all of them, root and the network lease checked once, the machine's state recorded
beside the figures (load, CPUs, commit, a reference loop's CPU time per section), a section
that cannot run here listed under `skipped` with the reason and one that raised under `failed`
with its error (the others still run; the exit status is 1), `--compare`.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
import traceback
from pathlib import Path

from agglab import bench
from agglab.bench import ROOT_SECTIONS, SECTIONS
from agglab.bench.figures import show
from agglab.ground import netlease, wire
from agglab.ground.paths import REPO, RESULTS


def environment() -> dict:
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True,
                                text=True).stdout.strip()
    except OSError:
        commit = ""
    return {"time": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "host": platform.node(), "cpus": os.cpu_count(),
            "load_average": [round(x, 2) for x in os.getloadavg()], "commit": commit,
            "python": platform.python_version(), "values_per_packet": wire.K}


def cpu_reference_seconds() -> float:
    """CPU seconds of a fixed pure-Python loop (the best of three): how fast this machine's
    CPU is right now. Why: on a shared virtual machine the same loop was measured taking
    0.23-0.36 s minute to minute with nothing else running, and every figure here that is
    CPU-bound moves with it; the JSON keeps it beside the load average, per section."""
    best = float("inf")
    for _ in range(3):
        t0, x = time.process_time(), 0
        for i in range(1_000_000):
            x += i
        best = min(best, time.process_time() - t0)
    return round(best, 4)


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m agglab.bench", description=bench.__doc__.splitlines()[0])
    ap.add_argument("--only", default=",".join(SECTIONS),
                    help=f"comma-separated sections (default all): {', '.join(SECTIONS)}")
    ap.add_argument("--elements", type=int, default=1_000_000, help="int32 per worker (wire, sparse)")
    ap.add_argument("--rates", default="5,10,20,40", help="link rates of the wire section, Mb/s")
    ap.add_argument("--wide-rates", default="20,40,80", help="link rates of the wide section, Mb/s")
    ap.add_argument("--reroute-elements", type=int, default=200_000,
                    help="int32 per worker of the reroute and switchfail runs (default 200000)")
    ap.add_argument("--bmv2-reroute-runs", type=int, default=3, help="runs per pipeline (bmv2-reroute)")
    ap.add_argument("--switchfail-kills", type=int, default=3, help="kills per pipeline (switchfail)")
    ap.add_argument("--switchfail-bw", type=float, default=None, help="link Mb/s (switchfail; default unshaped)")
    ap.add_argument("--daemon-seconds", type=float, default=5.0,
                    help="seconds the daemon section's senders run (default 5)")
    ap.add_argument("--policer-frames", type=int, default=100_000, help="flood frames (policer)")
    ap.add_argument("--policer-runs", type=int, default=3, help="runs with and without the policer (policer)")
    ap.add_argument("--chaos-seeds", type=int, default=20, help="seeds of the fault schedule (chaos)")
    ap.add_argument("--chaos-elements", type=int, default=60_000, help="int32 per worker (chaos)")
    ap.add_argument("--sparse-window", type=int, default=None,
                    help="slots per worker of the sparse runs (default the run default, ground/runspec.py "
                         "SPARSE_WINDOW): each slot "
                         "is a column whose lead round is sent whatever the density")
    ap.add_argument("--limit-seconds", type=float, default=5.0,
                    help="seconds each kernel and switch run of the limit section is measured (default 5)")
    ap.add_argument("--limit-elements", type=int, default=1_048_576,
                    help="int32 of each agent allreduce of the limit section (default 1048576)")
    ap.add_argument("--limit-gap-ms", type=float, default=0.0,
                    help="ms between a frame's arrival and the next frame at the limit section's low rate, "
                         "kernel and switch (default 0: back to back, as the agent's window of 1)")
    ap.add_argument("--out", type=Path, help="JSON file (default results/bench/<time>.json)")
    ap.add_argument("--compare", type=Path, metavar="PREV.json", help="print each figure's change since PREV")
    return ap


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = build_parser()
    a = ap.parse_args(argv)
    a.sections = [s.strip() for s in a.only.split(",") if s.strip()]
    unknown = [s for s in a.sections if s not in SECTIONS]
    try:
        a.rates = [float(r) for r in a.rates.split(",")]
    except ValueError:
        unknown.append(f"--rates {a.rates}")
    try:
        a.wide_rates = [float(r) for r in a.wide_rates.split(",")]
    except ValueError:
        unknown.append(f"--wide-rates {a.wide_rates}")
    if a.sparse_window is not None and not 1 <= a.sparse_window <= wire.SLOTS:
        unknown.append(f"--sparse-window {a.sparse_window}")
    if a.limit_seconds <= 0 or a.limit_elements < 1 or a.limit_gap_ms < 0:
        unknown.append("--limit-seconds/--limit-elements/--limit-gap-ms")
    if unknown or a.elements < 1 or any(r <= 0 for r in (a.rates or [1]) + (a.wide_rates or [1])):
        ap.exit(2, f"agglab bench: bad arguments {unknown or [a.elements]}; sections are {', '.join(SECTIONS)}\n")
    if a.compare and not a.compare.is_file():
        ap.exit(2, f"agglab bench: --compare {a.compare}: no such file\n")
    return a


def failure_text(exc: BaseException) -> str:
    """Why a section has no figures: the exception's type and text (and the error it wraps, where
    it keeps one in `inner`: Thrift's "unexpected exception" says nothing without its socket
    error). An exception raised with no
    text (a bare `assert`, `TimeoutError()`) would leave the reason empty, so then its text is
    what a traceback ends with: where it was raised, and the exception it came from."""
    inner = getattr(exc, "inner", None)      # Thrift's transport errors keep the socket's own there
    if str(exc).strip():
        text = f"{type(exc).__name__}: {exc}"
        return text + (f" from {failure_text(inner)}" if isinstance(inner, BaseException) else "")
    parts = [type(exc).__name__]
    for frame in traceback.extract_tb(exc.__traceback__)[-1:]:
        path = Path(frame.filename)
        shown = path.relative_to(REPO) if path.is_relative_to(REPO) else path
        parts.append(f"raised at {shown}:{frame.lineno} in {frame.name}" + (f": {frame.line}" if frame.line else ""))
    cause = exc.__cause__ or exc.__context__
    if cause is not None:
        parts.append(f"from {failure_text(cause)}")
    return " ".join(parts)


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    previous = {}
    if a.compare:
        try:
            previous = {f["name"]: f for f in json.loads(a.compare.read_text())["figures"]}
        except (ValueError, KeyError, TypeError) as exc:
            print(f"agglab bench: --compare {a.compare} is not a bench result ({exc})", file=sys.stderr)
            return 2
    alone = os.geteuid() == 0 and any(s in ROOT_SECTIONS for s in a.sections)
    if alone:
        try:                                         # its figures need the CPU alone (ground/netlease.py)
            netlease.acquire("agglab bench", alone=True)
        except netlease.NetworkBusy as exc:
            print(f"agglab bench: {exc}", file=sys.stderr)
            return exc.exit_code
    try:
        return _run_sections(a, previous)
    finally:
        if alone:
            netlease.release()


def _run_sections(a, previous: dict) -> int:
    """Every section of `a`, one record each, written to the result file; 1 if one failed."""
    report = {**environment(), "figures": [], "skipped": [], "failed": []}
    for section in a.sections:
        if section in ROOT_SECTIONS and os.geteuid() != 0:
            report["skipped"].append({"section": section, "why": "needs root"})
            print(f"\n== {section}: skipped (needs root)", flush=True)
            continue
        cpu_ref = cpu_reference_seconds()
        print(f"\n== {section} (CPU reference loop {cpu_ref * 1e3:.0f} ms)", flush=True)
        t0 = time.monotonic()
        try:
            figures = bench.measure(section, a)
        except KeyboardInterrupt:                    # the section removed what it started on its way out
            print(f"agglab bench: interrupted during {section}; nothing written", file=sys.stderr)
            return 130
        except bench.SectionSkipped as exc:          # cannot run here: a tool is absent
            report["skipped"].append({"section": section, "why": str(exc)})
            print(f"{section}: skipped ({exc})", flush=True)
            continue
        except Exception as exc:                     # one broken section must not lose the others
            why = failure_text(exc)
            report["failed"].append({"section": section, "why": why})
            print(f"{section} failed: {why}", flush=True)
            continue
        for f in figures:
            f["section"] = section
            f["cpu_reference_s"] = cpu_ref
            print(show(f, previous.get(f["name"])), flush=True)
        report["figures"] += figures
        print(f"({section}: {time.monotonic() - t0:.0f} s)", flush=True)
    report["load_average_end"] = [round(x, 2) for x in os.getloadavg()]
    out = a.out or RESULTS / "bench" / f"{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1) + "\n")
    targets = [f for f in report["figures"] if f["target"]]
    print(f"\n{sum(bool(f['met']) for f in targets)} of {len(targets)} targets met; "
          f"load average {report['load_average']} at the start, {report['load_average_end']} at the end, "
          f"on {report['cpus']} CPUs; written to {out}")
    if report["failed"]:
        print(f"failed: {', '.join(f['section'] for f in report['failed'])}", file=sys.stderr)
        return 1
    return 0
