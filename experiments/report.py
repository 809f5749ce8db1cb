"""report.md: what ran, where, what came out, and what went wrong.

Why a written report next to the CSVs: a plot without the machine it ran on and
without the failed runs invites wrong conclusions.  The report states the
backend, the cores and kernel, the git commit, how many runs were exact, every
failure with its error, and that emulator timings show trends, not line rates.
"""

from __future__ import annotations

import os
import platform
import subprocess
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from experiments.config import DTYPE_BYTES
from experiments.plots import PLOTS, human_bytes

if TYPE_CHECKING:
    from experiments.runner import Outcome

REPO = Path(__file__).resolve().parent.parent

TIMING_NOTE = (
    "Timings come from a packet-level emulator: every packet crosses Linux veth pairs and a "
    "switch running in user space (BMv2's simple_switch or agglab's Python software switch), "
    "all sharing the cores listed above. Absolute numbers are orders of magnitude below a "
    "hardware switch's line rate and depend on this machine's load; compare **trends** "
    "(how time grows with workers and size, and between backends on the same machine), "
    "not rates. If the load average approached the core count, the emulator was CPU-bound."
)


def _read(path: str) -> str:
    try:
        return Path(path).read_text()
    except OSError:
        return ""


def _cpu_model() -> str:
    for line in _read("/proc/cpuinfo").splitlines():
        if line.lower().startswith(("model name", "hardware", "cpu model")):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def _memory() -> str:
    for line in _read("/proc/meminfo").splitlines():
        if line.startswith("MemTotal:"):
            return human_bytes(int(line.split()[1]) * 1024)
    return "unknown"


def _git_commit() -> str:
    try:
        head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True, timeout=5, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=5).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown (not a git checkout)"
    return f"{head} (with uncommitted changes)" if dirty else head


def _loadavg() -> str:
    try:
        return " / ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "unknown"


def machine_facts() -> dict[str, str]:
    """Facts that decide how emulator timings can be read; taken before the first run."""
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:
        usable = os.cpu_count() or 0
    return {
        "cores": f"{os.cpu_count()} ({usable} usable by this process)",
        "cpu": _cpu_model(),
        "memory": _memory(),
        "kernel": f"{platform.system()} {platform.release()}",
        "os": platform.platform(),
        "python": platform.python_version(),
        "agglab commit": _git_commit(),
        "load average (1/5/15 min) before": _loadavg(),
    }


def _cell(value: Any, spec: str = "") -> str:
    if value is None or value == "":
        return "–"
    if isinstance(value, float) and spec:
        return format(value, spec)
    return str(value)


def _stamp(t: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S %Z", time.localtime(t))


def _what_ran(outcome: Outcome) -> list[str]:
    cfg = outcome.config
    size = human_bytes(cfg.fixed_elements * DTYPE_BYTES[cfg.dtype])
    return [
        "## What ran", "",
        f"- config: `{cfg.source}` (as run: [config.yaml](config.yaml))",
        f"- backend: **{cfg.backend}**; dtype {cfg.dtype}; loss {cfg.loss:g}; "
        f"window {cfg.window if cfg.window is not None else 'agent default'}; "
        f"seeds {cfg.seed}..{cfg.seed + cfg.repeats - 1} (one per repeat)",
        f"- workers sweep: {list(cfg.sweep_workers)} at {cfg.fixed_elements} elements ({size} per worker)",
        f"- size sweep: {list(cfg.sweep_elements)} elements at {cfg.fixed_workers} workers",
        f"- {len(cfg.points())} distinct points x {cfg.repeats} repeat(s) = {len(cfg.plan())} planned runs; "
        f"{len(outcome.rows)} ran" + (" (**interrupted**)" if outcome.interrupted else ""),
        f"- started {_stamp(outcome.started)}, finished {_stamp(outcome.finished)} "
        f"({outcome.finished - outcome.started:.1f} s)",
        "- raw data: [runs.csv](runs.csv) (one row per run), [summary.csv](summary.csv) (medians per point)",
        "",
    ]


def _medians(outcome: Outcome) -> list[str]:
    dtype_bytes = DTYPE_BYTES[outcome.config.dtype]
    lines = [
        "## Medians per point", "",
        "Medians over the successful runs of each point; min–max in brackets.", "",
        "| workers | elements | size/worker | sweep | runs | exact | completion (s) | "
        "goodput (Mb/s/worker) | packets | retransmissions | max abs error |",
        "|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for s in outcome.summary:
        spread = (f" [{_cell(s['seconds_min'], '.3f')}–{_cell(s['seconds_max'], '.3f')}]"
                  if s["seconds_min"] is not None else "")
        lines.append(
            f"| {s['workers']} | {s['elements']} | {human_bytes(s['elements'] * dtype_bytes)} | "
            f"{s['sweeps']} | {s['runs']} | {s['exact']}/{s['runs']} | "
            f"{_cell(s['seconds_median'], '.3f')}{spread} | {_cell(s['goodput_mbps_median'], '.1f')} | "
            f"{_cell(s['packets_median'], '.0f')} | {_cell(s['retransmissions_median'], '.0f')} | "
            f"{_cell(s['max_abs_error_max'], 'g')} |")
    return lines + [""]


def _failures(outcome: Outcome) -> list[str]:
    lines = ["## Failures and inexact runs", ""]
    bad = [r for r in outcome.rows if not r["exact"]]
    for r in bad:
        what = r["error"] or f"result not exact (max abs error {_cell(r.get('max_abs_error'))})"
        lines.append(f"- run {r['run']} (workers={r['workers']} elements={r['elements']} "
                     f"rep={r['repeat'] + 1}): {what}")
    missing = len(outcome.config.plan()) - len(outcome.rows)
    if missing:
        lines.append(f"- {missing} planned run(s) did not run (interrupted)")
    if not bad and not missing:
        lines.append("None: every run finished and its result was exact.")
    return lines + [""]


def render(outcome: Outcome, facts: dict[str, str]) -> str:
    """The whole report as Markdown text."""
    cfg = outcome.config
    planned = len(cfg.plan())
    verdict = (f"**All {planned} runs exact.**" if outcome.all_exact else
               f"**{outcome.exact_runs} of {planned} planned runs exact** "
               f"({len(outcome.rows)} ran) — see Failures below.")
    facts = {**facts, "load average (1/5/15 min) after": _loadavg()}
    lines = [f"# agglab experiment `{cfg.name}` on backend `{cfg.backend}`", "", verdict, ""]
    lines += _what_ran(outcome)
    lines += ["## Machine", "", "| fact | value |", "|---|---|"]
    lines += [f"| {k} | {v} |" for k, v in facts.items()] + [""]
    lines += _medians(outcome)
    lines += ["## Plots", ""]
    for name, *_ in PLOTS:
        lines += [f"[{name}]({name})", "", f"![{name}]({name})", ""]
    lines += ["## About these timings", "", TIMING_NOTE, ""]
    lines += _failures(outcome)
    return "\n".join(lines)


def write_report(outcome: Outcome, facts: dict[str, str]) -> Path:
    path = outcome.out_dir / "report.md"
    path.write_text(render(outcome, facts))
    return path
