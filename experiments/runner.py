"""Run a sweep: one `run_allreduce` per (point, repeat), then CSVs, plots and a report.

Why the run function is injected: `emulation.session.run_allreduce` needs root, Mininet
and a switch; tests pass a fake with the same keyword signature so everything
here (bookkeeping, medians, failure handling, exit status) is tested anywhere.

Why failures are rows, not crashes: one bad point (a switch that did not start,
a timeout) must not throw away the other 19 runs of a sweep; the row keeps the
error text and the exit status turns non-zero.
"""

from __future__ import annotations

import csv
import json
import math
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, TextIO

import yaml

from experiments.config import Config, Point

RunFn = Callable[..., dict]

# Keys run_allreduce promises; a result without them is recorded as a failure.
RESULT_KEYS = ("ok", "exact", "workers", "elements", "dtype", "seconds", "goodput_mbps",
               "packets", "retransmissions", "max_abs_error", "backend")
# Fixed leading columns of runs.csv; extra keys from run_allreduce follow, sorted.
RUN_COLUMNS = ("run", "repeat", "point", "sweeps", "workers", "elements", "dtype", "loss",
               "window", "seed", "backend", "ok", "exact", "seconds", "goodput_mbps", "packets",
               "retransmissions", "max_abs_error", "wall_seconds", "error")
MEDIAN_KEYS = ("seconds", "goodput_mbps", "packets", "retransmissions", "wall_seconds")
SUMMARY_COLUMNS = ("point", "workers", "elements", "sweeps", "runs", "ok", "exact",
                   *(f"{k}_median" for k in MEDIAN_KEYS), "seconds_min", "seconds_max",
                   "max_abs_error_max", "errors")
# Values that must come back as they were asked for; anything else is a wrong run.
ECHOED_KEYS = ("workers", "elements", "dtype", "backend")


class SetupError(RuntimeError):
    """The sweep cannot start at all (e.g. emulation.session is missing)."""


@dataclass
class Outcome:
    """Everything one sweep produced, handed to the CSV, plot and report writers."""

    config: Config
    out_dir: Path
    rows: list[dict[str, Any]] = field(default_factory=list)
    summary: list[dict[str, Any]] = field(default_factory=list)
    started: float = 0.0
    finished: float = 0.0
    interrupted: bool = False
    files: list[Path] = field(default_factory=list)

    @property
    def exact_runs(self) -> int:
        return sum(1 for r in self.rows if r["exact"] is True)

    @property
    def all_exact(self) -> bool:
        planned = len(self.config.plan())
        return not self.interrupted and len(self.rows) == planned and self.exact_runs == planned


def default_run_fn() -> RunFn:
    """Import the real emulator only when a sweep actually runs (it needs Mininet)."""
    try:
        from emulation.session import run_allreduce
    except ImportError as exc:
        raise SetupError(f"cannot import emulation.session.run_allreduce ({exc}); is the emulator "
                         "installed (make setup) and are you in the repository?") from exc
    return run_allreduce


def run_one(run_fn: RunFn, cfg: Config, point: Point, point_index: int, repeat: int,
            run_index: int) -> dict[str, Any]:
    """One allreduce as a CSV row; exceptions and malformed results become `error`."""
    row: dict[str, Any] = {
        "run": run_index, "repeat": repeat, "point": point_index, "sweeps": "+".join(point.sweeps),
        "workers": point.workers, "elements": point.elements, "dtype": cfg.dtype, "loss": cfg.loss,
        "window": cfg.window, "seed": cfg.seed + repeat, "backend": cfg.backend,
        "ok": False, "exact": False, "error": "",
    }
    asked = {k: row[k] for k in ECHOED_KEYS}
    t0 = time.monotonic()
    try:
        result = run_fn(workers=point.workers, elements=point.elements, dtype=cfg.dtype,
                        loss=cfg.loss, backend=cfg.backend, window=cfg.window, seed=cfg.seed + repeat)
    except Exception as exc:  # noqa: BLE001 - any failure of one run is data, not a crash
        result, error = None, f"{type(exc).__name__}: {exc}".strip()
    else:
        error = ""
    row["wall_seconds"] = round(time.monotonic() - t0, 3)
    if result is not None and not isinstance(result, dict):
        error = f"run_allreduce returned {type(result).__name__}, not a dict"
    elif isinstance(result, dict):
        row.update(flatten(result))
        missing = [k for k in RESULT_KEYS if k not in result]
        wrong = [f"{k}={result[k]!r} (asked {asked[k]!r})" for k in ECHOED_KEYS
                 if k in result and result[k] != asked[k]]
        if missing:
            error = f"result lacks keys: {', '.join(missing)}"
        elif wrong:
            error = f"result does not match the request: {', '.join(wrong)}"
        elif not result.get("ok"):
            error = failure_text(result)
    row["ok"] = bool(row.get("ok")) and not error
    row["exact"] = bool(row.get("exact")) and row["ok"]
    row["error"] = shorten(" ".join(error.split()))
    return row


def shorten(text: str, limit: int = 600) -> str:
    """Keep the head and the tail of a long error: a traceback's last line names the cause."""
    if len(text) <= limit:
        return text
    head = limit // 3
    return f"{text[:head]} … {text[-(limit - head - 3):]}"


def failure_text(result: dict[str, Any]) -> str:
    """Why a result says ok=False: its own error(s), else the inexactness it reports."""
    errors = result.get("errors") or result.get("error")
    if isinstance(errors, (list, tuple)):
        errors = "; ".join(str(e) for e in errors)
    if errors:
        return str(errors)
    if not result.get("exact"):
        return f"result not exact (max abs error {result.get('max_abs_error')})"
    return "run reported ok=False"


def flatten(result: dict[str, Any]) -> dict[str, Any]:
    """CSV-ready values: nested dicts become `key.sub` columns, lists JSON, numpy scalars plain."""
    out: dict[str, Any] = {}
    for key, value in result.items():
        if isinstance(value, dict):
            for sub, inner in value.items():
                out[f"{key}.{sub}"] = _plain(inner)
        else:
            out[key] = _plain(value)
    return out


def _plain(value: Any) -> Any:
    if getattr(value, "shape", None) == () and hasattr(value, "item"):
        return value.item()
    if isinstance(value, (list, tuple, dict)):
        return json.dumps(value, default=str)
    return value


def summarize(cfg: Config, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per point: counts, and medians over the runs that succeeded."""
    out = []
    for index, point in enumerate(cfg.points()):
        mine = [r for r in rows if r["point"] == index]
        good = [r for r in mine if r["ok"]]
        entry: dict[str, Any] = {
            "point": index, "workers": point.workers, "elements": point.elements,
            "sweeps": "+".join(point.sweeps), "runs": len(mine), "ok": len(good),
            "exact": sum(1 for r in mine if r["exact"]), "errors": len(mine) - len(good),
        }
        for key in MEDIAN_KEYS:
            entry[f"{key}_median"] = _stat(statistics.median, good, key)
        entry["seconds_min"] = _stat(min, good, "seconds")
        entry["seconds_max"] = _stat(max, good, "seconds")
        entry["max_abs_error_max"] = _stat(max, good, "max_abs_error")
        out.append(entry)
    return out


def _stat(fn: Callable, rows: list[dict[str, Any]], key: str) -> float | None:
    values = [float(r[key]) for r in rows if _is_number(r.get(key))]
    return round(fn(values), 6) if values else None


def _is_number(value: Any) -> bool:
    return (isinstance(value, (int, float)) and not isinstance(value, bool)
            and math.isfinite(float(value)))


def progress_text(row: dict[str, Any]) -> str:
    """The tail of a progress line: time, goodput, verdict, or the error."""
    if not row["ok"]:
        return f"FAILED after {row['wall_seconds']:.1f} s: {row['error']}"
    text = f"{_fmt(row.get('seconds'), '.2f')} s, {_fmt_rate(row.get('goodput_mbps'))} Mb/s/worker"
    if row["exact"]:
        return f"{text}, exact"
    return f"{text}, NOT EXACT (max abs error {row['max_abs_error']})"


def _fmt(value: Any, spec: str) -> str:
    return format(float(value), spec) if _is_number(value) else "?"


def _fmt_rate(value: Any) -> str:
    """Whole Mb/s for big rates, three significant digits for the slow emulator's small ones."""
    if not _is_number(value):
        return "?"
    return f"{value:.0f}" if abs(value) >= 100 else f"{value:.3g}"


def run_experiment(cfg: Config, out_dir: Path, run_fn: RunFn | None = None,
                   log: TextIO = sys.stderr) -> Outcome:
    """Run the whole plan, then write every output file (also after Ctrl-C)."""
    from experiments.report import machine_facts, write_report
    from experiments.plots import write_plots

    run_fn = run_fn or default_run_fn()
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    outcome = Outcome(cfg, out_dir, started=time.time())
    facts_before = machine_facts()
    plan = cfg.plan()
    index_of = {p: i for i, p in enumerate(cfg.points())}
    try:
        for n, (repeat, point) in enumerate(plan, start=1):
            print(f"[{n}/{len(plan)}] {point.label()} rep={repeat + 1} ... ", end="", file=log, flush=True)
            row = run_one(run_fn, cfg, point, index_of[point], repeat, n)
            outcome.rows.append(row)
            print(progress_text(row), file=log, flush=True)
    except KeyboardInterrupt:
        outcome.interrupted = True
        print("\ninterrupted: writing the runs so far", file=log, flush=True)
    outcome.finished = time.time()
    outcome.summary = summarize(cfg, outcome.rows)
    outcome.files.append(write_csv(out_dir / "runs.csv", outcome.rows, RUN_COLUMNS))
    outcome.files.append(write_csv(out_dir / "summary.csv", outcome.summary, SUMMARY_COLUMNS))
    (out_dir / "config.yaml").write_text(yaml.safe_dump(cfg.as_dict(), sort_keys=False))
    outcome.files.append(out_dir / "config.yaml")
    outcome.files.extend(write_plots(out_dir, cfg, outcome.summary, outcome.rows))
    outcome.files.append(write_report(outcome, facts_before))
    return outcome


def write_csv(path: Path, rows: list[dict[str, Any]], leading: tuple[str, ...]) -> Path:
    """CSV with the fixed columns first and any extra keys after them, sorted."""
    extra = sorted({k for r in rows for k in r} - set(leading))
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=[*leading, *extra], restval="")
        writer.writeheader()
        for r in rows:
            writer.writerow({k: ("" if v is None else v) for k, v in r.items()})
    return path
