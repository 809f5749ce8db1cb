"""Run a suite of trend definitions: resumable, interruptible, with a progress bar and ETA.

Why runs.jsonl: every finished run is appended (and flushed) the moment it ends, so Ctrl-C,
a crash or a reboot loses at most the run in flight, and a rerun skips every run already
recorded as ok (failed runs are tried again: the failure may have been fixed, e.g. a
baseline that was not built yet). The report is rewritten from the file after every sweep.

Why the run function is injected: `agglab.emulation.session.run_allreduce` needs root and Mininet;
tests pass a fake taking a RunSpec so bookkeeping, resume, medians and the report are
tested anywhere.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, TextIO

from agglab.controller import topologies
from agglab.controller.topology import switches
from agglab.emulation.wire_model import BoundError, wire_seconds
from agglab.emulation.fidelity import (DEFAULT_CEILING_MBPS, SOFT, calibration_path, ceiling_for, ceiling_for_shape,
                                load_calibration)
from agglab.ground import wire
from agglab.ground.interrupts import signum_of
from agglab.ground.runspec import RunSpec
from agglab.ground.schemes import IN_NETWORK
from agglab.experiments.definition import ConfigError, Definition, Point, ProgramRun
from agglab.experiments.definition_file import load_definition, parse_definition, read_yaml
from agglab.experiments.headroom import headroom, share_of
from agglab.experiments.shapes import calibrated_by_shape, host_trend_ceiling, key_of, trend_shape

# specs of one point (its repeats) -> results; a ProgramRun for program: pace points
RunFn = Callable[[list["RunSpec | ProgramRun"]], Iterator[dict]]
SUITE_KEYS = ("name", "repeats", "definitions", "ceiling_mbps", "about")   # about: why this suite, in its report
ENTRY_KEYS = ("file", "sweep", "repeats", "series", "emulated", "run")


class SetupError(RuntimeError):
    """The suite cannot start (e.g. the emulator is not importable)."""


@dataclass
class Suite:
    name: str
    definitions: list[Definition]
    ceiling_mbps: float
    ceiling_source: str
    source: str
    backend: str = SOFT                # every run's data plane: whose calibration scales the suite
    about: str = ""                    # the suite file's `about`: why its sizes are what they are


@dataclass
class Outcome:
    suite: Suite
    out_dir: Path
    rows: list[dict[str, Any]] = field(default_factory=list)
    interrupted: int = 0               # the stop signal's number (SIGINT 2, SIGTERM 15, SIGHUP 1), 0 if none
    ran: int = 0
    skipped: int = 0
    started: float = 0.0
    finished: float = 0.0




def ceiling(backend: str = SOFT) -> tuple[float, str]:
    """The per-link rate the fastest link runs at (Mb/s) on `backend`, and where it came from:
    that backend's own calibration (a BMv2 switch needs far more CPU per frame than the twin)."""
    cal = load_calibration(backend)
    if cal and cal.get("ceiling_mbps"):
        c = float(cal["ceiling_mbps"])
        return share_of(c, backend), (f"{headroom(backend):.0%} of the {backend} ceiling {c:g} Mb/s calibrated "
                                        f"{cal.get('when', '?')} with {cal.get('workers')} workers, window "
                                        f"{cal.get('window')} ({calibration_path()})")
    return DEFAULT_CEILING_MBPS, (f"default {DEFAULT_CEILING_MBPS:g} Mb/s: no calibration at {calibration_path()} "
                                  f"for {backend} (run `agglab calibrate --backend {backend}`)")


def needs_calibration(backend: str) -> bool:
    """True when `backend` has no ceiling of its own and no measured default: the 5 Mb/s
    default was measured on the software twin; BMv2 at that rate had 7 of the quick suite's
    15 runs flagged CPU-bound, so it must be calibrated before it runs."""
    cal = load_calibration(backend)
    return backend != SOFT and not (cal and cal.get("ceiling_mbps"))


def suite_backend(defs: list[Definition], path: Path, backend: str | None) -> str:
    """The suite's one backend: `backend` (the command line's, set on every definition), else
    the definitions' own (`run: {backend: ...}`); a suite mixing backends has no one ceiling."""
    if backend:
        for d in defs:
            d.run["backend"] = backend
        return backend
    found = {d.run.get("backend", SOFT) for d in defs}
    if len(found) > 1:
        raise ConfigError(str(path), "run.backend", f"a suite runs on one backend, found {sorted(found)}")
    return found.pop() if found else SOFT


def load_suite(path: str | Path, repeats: int | None = None, backend: str | None = None) -> Suite:
    """A suite file (`definitions: [...]`) or one definition file (a suite of one), run on
    `backend` (default: the definitions' own) at that backend's ceiling."""
    path = Path(path)
    raw = read_yaml(path)
    if not isinstance(raw, dict):
        raise ConfigError(str(path), "<top>", "must be a mapping")
    top = {} if repeats is None else {"repeats": repeats}
    if "definitions" not in raw:
        defs = [parse_definition(raw, str(path), top)]
        on = suite_backend(defs, path, backend)
        return Suite(raw.get("name", path.stem), defs, *ceiling(on), str(path), on)
    for key in raw:
        if key not in SUITE_KEYS:
            raise ConfigError(str(path), key, f"unknown suite key (allowed: {', '.join(SUITE_KEYS)})")
    defs = []
    for i, entry in enumerate(raw["definitions"] or []):
        entry = {"file": entry} if isinstance(entry, str) else entry
        if not isinstance(entry, dict) or "file" not in entry:
            raise ConfigError(str(path), f"definitions[{i}]", "must be a file name or {file: ..., sweep: ...}")
        for key in entry:
            if key not in ENTRY_KEYS:
                raise ConfigError(str(path), f"definitions[{i}].{key}", f"unknown key (allowed: {', '.join(ENTRY_KEYS)})")
        over = {k: v for k, v in entry.items() if k != "file"}
        if "repeats" in raw:
            over.setdefault("repeats", raw["repeats"])
        over.update(top)
        defs.append(load_definition((path.parent / entry["file"]).resolve(), over))
    if not defs:
        raise ConfigError(str(path), "definitions", "is empty")
    on = suite_backend(defs, path, backend)
    ceil, where = ceiling(on)
    if "ceiling_mbps" in raw:
        ceil, where = float(raw["ceiling_mbps"]), f"fixed by {path}"
    about = " ".join(str(raw.get("about", "")).split())
    return Suite(str(raw.get("name", path.stem)), defs, ceil, where, str(path), on, about)


def results_name(name: str, k: int = wire.K, backend: str = SOFT) -> str:
    """The results folder of suite `name` on `backend` in program variant `k`: `default` for
    the soft backend, `default-bmv2` for BMv2, `-k256` after either for the wide variant
    (AGGLAB_K=256). Resuming never mixes rows of two backends or variants, and the report
    finds the other backend's results of the same suite beside its own (`twin_dir`)."""
    return name + ("" if backend == SOFT else f"-{backend}") + wire.variant_suffix(k)


def twin_dir(out_dir: Path, backend: str, other: str, k: int = wire.K) -> Path:
    """Where the same suite's results on `other` live, beside `out_dir` (this backend's,
    named by `results_name`)."""
    name = out_dir.name
    for suffix in (wire.variant_suffix(k), "" if backend == SOFT else f"-{backend}"):
        if suffix and name.endswith(suffix):
            name = name[:-len(suffix)]
    return out_dir.parent / results_name(name, k, other)


# Algorithms whose repeats may share one network (Session.allreduce runs them again on the
# same job). The hosts' baselines run in a fresh network per run until that is known to hold.
REUSABLE = IN_NETWORK


def default_run_fn(out_dir: Path | None = None) -> RunFn:
    """Runs a group of specs that differ only in their seed (the repeats of one point): in one
    network when the algorithm allows it and no link is failed on purpose (a failed link stays
    down), else in a fresh network each; every network runs a small untimed allreduce first
    (`Session.warm_up`: a fresh BMv2 switch's first packets cost what no later run pays). A run that raises inside a shared network ends the
    sharing: the rest of the group runs in fresh networks. A ProgramRun (program: pace) runs
    `agglab train --profile-only` for both schedulers in one network against one calibration
    (a paired comparison); the other scheduler's result waits for its own point."""
    try:
        from agglab.emulation.session import Session, run_spec  # lazy: a broken install is one line (SetupError), not a traceback
    except ImportError as exc:
        raise SetupError(f"cannot import agglab.emulation.session ({exc}): run `make setup` in the repository") from exc
    pending: dict[str, dict] = {}        # the other scheduler of a PACE pair, by the pair's identity

    def pace(job: ProgramRun) -> dict:
        from agglab.emulation.pace_run import PaceOptions, per_scheduler, run_profile  # lazy: loads pyroute2, only default_run_fn() needs it

        scheduler = job.option("scheduler")
        pair = json.dumps({k: v for k, v in job.to_dict().items() if k != "scheduler"}, sort_keys=True, default=str)
        if pair in pending and scheduler in pending[pair]:
            return pending[pair].pop(scheduler)
        opts = PaceOptions(**{k: job.option(k) for k in ("link_gbps", "alpha_us", "partition_mb", "threshold_mb",
                                                         "cycle_ms", "emulated_mb", "plan_cost")
                              if job.option(k) is not None})
        where = (out_dir or Path("results")) / "pace" / f"{job.option('model')}-seed{job.seed}"
        both = per_scheduler(run_profile(job.spec, job.option("model"), ["fifo", "pace"], opts, where))
        mine = both.pop(scheduler)
        pending[pair] = both
        return mine

    def fresh(spec: RunSpec) -> dict:
        return run_spec(spec, warm=True)  # the RunSpec itself: checked once, in the Session

    def run(specs: list) -> Iterator[dict]:
        with network_turn():
            yield from run_group_now(specs)

    def run_group_now(specs: list) -> Iterator[dict]:
        if isinstance(specs[0], ProgramRun):
            for job in specs:
                yield pace(job)
            return
        if len(specs) == 1:
            yield fresh(specs[0])
            return
        left = list(specs)
        try:
            with Session(specs[0]) as session:
                warmed = session.warm_up()        # each network's first packets untimed (Session.warm_up)
                while left:
                    result = session.allreduce(seed=left[0].seed)
                    if warmed:
                        result["warm_up"], warmed = warmed, None
                    result["events"] = session.events.lines()
                    left.pop(0)
                    yield result
        except Exception:  # noqa: BLE001 - retried below in fresh networks
            pass
        for spec in left:
            yield fresh(spec)
    return run


# Seconds this process spent waiting for the network turn: on a shared machine the suite's wall
# time is its own runs plus other checkouts' turns, and the final line says which was which.
TURN_WAIT = {"seconds": 0.0}


@contextlib.contextmanager
def network_turn() -> Iterator[None]:
    """With AGGLAB_NET_LOCK=PATH, hold an exclusive flock on PATH for one point's runs (its
    network's life), as the test suite does per test: a long suite on a shared machine takes
    turns run by run with other checkouts' tests instead of holding the machine for an hour.
    Unset: no lock (the network lease, ground/netlease.py, still refuses a second network).
    With AGGLAB_NET_TURN_HELD=1 the process that started this one holds the turn for it (a
    test, tests/conftest.py): waiting for it would wait forever."""
    path = os.environ.get("AGGLAB_NET_LOCK")
    if not path or os.environ.get("AGGLAB_NET_TURN_HELD") == "1":
        yield
        return
    with open(path, "a") as fh:
        asked = time.monotonic()
        fcntl.flock(fh, fcntl.LOCK_EX)
        TURN_WAIT["seconds"] += time.monotonic() - asked
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def shareable(p: Point) -> bool:
    return bool(p.spec) and not p.program and p.spec.algorithm in REUSABLE and not p.spec.fail \
        and not p.spec.fail_switch


def plan(suite: Suite, out_dir: Path) -> list[tuple[Definition, Point, list[int]]]:
    """(definition, point, repeats): each distinct RunSpec once, with all its repeats (they
    share one network where they can: building it costs more than a small run)."""
    out = []
    for d in suite.definitions:
        seen = set()
        for p in d.points(trend_ceiling(suite, d), out_dir / "topologies", lambda w: scale_ceiling(suite, w)):
            if p.key not in seen:
                seen.add(p.key)
                out.append((d, p, list(range(d.repeats))))
    return out


def trend_workers(d: Definition) -> int:
    """The most workers any point of a trend runs."""
    return max((int({**d.run, **combo, **over}.get("workers", 4)) for combo in d.combos()
                for over in (d.series.values() or [{}])), default=4)


def trend_ceiling(suite: Suite, d: Definition) -> float:
    """The rate a trend's fastest link runs at: the suite's, or lower where its own shape
    needs it. On BMv2, its headroom share (experiments/headroom.py: 60%) of its own shape's
    ceiling (experiments/shapes.py: its network, workers and scheme) when that shape was
    calibrated; otherwise (and on the soft backend, 80%) that share of the smallest calibrated shape with at least its workers when it has
    more than 8 (`agglab calibrate --topology fattree --k 8 --workers 128 ...`): more workers
    and switches need more CPU per link-second. A trend of host baselines with their own
    ceilings on its shape runs at its headroom share of the lowest (shapes.host_trend_ceiling). A suite
    that fixes its ceiling keeps it."""
    if suite.ceiling_source.startswith("fixed by"):
        return suite.ceiling_mbps
    if own := host_trend_ceiling(d, suite.backend):
        return min(suite.ceiling_mbps, share_of(own, suite.backend))
    if calibrated_by_shape(suite) and not d.emulated_sizes:
        own = ceiling_for_shape(key_of(trend_shape(d)), suite.backend)
        if own:
            return min(suite.ceiling_mbps, share_of(own, suite.backend))
    workers = trend_workers(d)
    found = ceiling_for(workers, suite.backend) if workers > 8 else None
    return min(suite.ceiling_mbps, share_of(found[0], suite.backend)) if found else suite.ceiling_mbps


def scale_ceiling(suite: Suite, workers: int) -> float:
    """The rate one scale of a per-scale trend (`emulated.gradient` keyed by workers) runs
    at: its backend's headroom share of the smallest calibrated shape with at least `workers`
    workers, so each scale runs as fast as its own size allows; the suite's ceiling without such a shape or
    when the suite fixes it."""
    if suite.ceiling_source.startswith("fixed by"):
        return suite.ceiling_mbps
    found = ceiling_for(workers, suite.backend)
    return share_of(found[0], suite.backend, 4) if found else suite.ceiling_mbps


def trend_rates(suite: Suite) -> dict[str, str]:
    """Each trend's fastest link where it is not the suite's (a calibrated shape set it), and
    on BMv2 every trend's with the shape it was calibrated as, as the report says it:
    `2.4 / 0.6 / 0.1 Mb/s at 8 / 32 / 128 workers (80% of shapes ...)`,
    `0.9 Mb/s (shape leafspine-w8-rat, 60% of its 1.5 Mb/s)`.

    Why: the suite's one figure (which may be the uncalibrated default) would otherwise stand
    for trends that ran at a hundredth of it."""
    out = {}
    for d in suite.definitions:
        if d.emulated_sizes:
            sizes = sorted(d.emulated_sizes)
            rates = [scale_ceiling(suite, w) for w in sizes]
            shapes = [found[1] for w in sizes if (found := ceiling_for(w, suite.backend))]
        else:
            rates, sizes, shapes = [trend_ceiling(suite, d)], [], []
            if calibrated_by_shape(suite):
                key = key_of(trend_shape(d))
                own = ceiling_for_shape(key, suite.backend)
                out[d.name] = (f"{rates[0]:g} Mb/s (shape {key}, " +
                               (f"{headroom(suite.backend):.0%} of its {own:g} Mb/s)" if own else "not calibrated: the suite's rate)"))
                continue
        if all(r == suite.ceiling_mbps for r in rates) or suite.ceiling_source.startswith("fixed by"):
            continue
        text = " / ".join(f"{r:g}" for r in rates) + " Mb/s"
        if sizes:
            text += " at " + " / ".join(map(str, sizes)) + " workers"
        if shapes:
            text += f" ({headroom(suite.backend):.0%} of the calibrated shapes {', '.join(dict.fromkeys(shapes))})"
        out[d.name] = text
    return out


def estimate_seconds(point: Point, runs: int = 1) -> float:
    """Set-up (grows with the switch count; once per shared network) plus 1.5x the point's
    own wire time (emulation/wire_model.py: its algorithm's bytes on its routes or trees; a
    sharded PS on one route per destination can take 50x an in-network run), else 1.5x the
    gradient's frames at the slowest link. The 1.5 and the set-up were fitted to the quick
    suite on a loaded 2-core machine: 15 runs in 38 s."""
    if point.spec is None:
        return 0.1 * runs
    if point.program:
        return runs * pace_seconds(point)
    try:
        g = topologies.for_run(point.spec)
    except ValueError:
        return 5.0
    rates = [e["bw"] for _, _, e in g.edges(data=True) if e.get("bw")] or [50.0]
    wire = point.spec.elements * 4 * 8 * 1.25 / (min(rates) * 1e6)
    try:
        wire = wire_seconds(point.spec, g)
    except (BoundError, ValueError, KeyError):
        pass
    setups = 1 if shareable(point) else runs
    return setups * (1.0 + 0.4 * len(switches(g))) + runs * (0.5 + 1.5 * wire)


def pace_seconds(point: Point) -> float:
    """Half of a FIFO+PACE pair (both run in one network): set-up, three rounds of host
    programs (calibration, FIFO, PACE) and about 2.5x the emulated gradient on the wire.
    Fitted to pace.yaml on a loaded 2-core machine: 3 pairs at 1 MiB, 5 Mb/s in 43 s."""
    wire = point.program.get("emulated_mb", 1.0) * 2**20 * 8 * 1.25 / (point.spec.bw * 1e6)
    return (3.0 + 2 * 3.0 + 2.5 * wire) / 2


def load_rows(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    rows = []
    for line in path.read_text().splitlines():
        try:
            rows.append(json.loads(line))
        except ValueError:
            continue                       # a line cut short by a crash
    return rows


def new_row(d: Definition, p: Point, repeat: int) -> dict[str, Any]:
    return {"definition": d.name, "key": p.key, "repeat": repeat, "series": p.series, "values": p.values,
            "spec": p.spec.to_dict() if p.spec else None, **({"program": p.program} if p.program else {}),
            "scale_rate": p.scale.rate, "scale_size": p.scale.size,
            "ok": False, "error": p.error, "when": time.strftime("%Y-%m-%d %H:%M:%S")}


def fill_row(row: dict[str, Any], result: dict | None, error: str, wall: float) -> dict[str, Any]:
    """A run's result (or the exception that ended it) as the row's fields."""
    result = result or {}
    row["wall_seconds"] = round(wall, 3)
    row["error"] = error[:600]
    for key in ("ok", "exact", "seconds", "goodput_mbps", "packets", "retransmissions", "fidelity",
                "failures", "trees", "errors", "pace", "jobs", "pool_occupancy", "host_tcp", "warm_up"):
        if key in result:
            row[key] = result[key]
    if result and not result.get("ok") and not row["error"]:
        errs = result.get("errors") or ["run not ok"]
        row["error"] = "; ".join(str(e).splitlines()[0] for e in errs)[:600]
    row["ok"] = bool(result.get("ok")) and bool(result.get("exact", True)) and not error
    return row


def run_group(run_fn: RunFn, d: Definition, p: Point, repeats: list[int]) -> Iterator[dict[str, Any]]:
    """Rows of one point's repeats as they finish; an unavailable point or an exception
    becomes the error of the runs it stopped (one bad run is data, not a crash)."""
    if p.spec is None:
        for r in repeats:
            yield new_row(d, p, r)
        return
    specs = [p.runnable(p.spec.seed + r) for r in repeats]
    results = run_fn(specs)
    for r in repeats:
        row, t0 = new_row(d, p, r), time.monotonic()
        try:
            result, error = next(results), ""
        except StopIteration:
            result, error = None, "the run function returned fewer results than runs"
        except (Exception, SystemExit) as exc:  # noqa: BLE001
            result, error = None, f"{type(exc).__name__}: {exc}".strip()
            results = run_fn(specs[repeats.index(r) + 1:]) if r != repeats[-1] else iter(())
        yield fill_row(row, result, error, time.monotonic() - t0)


def run_suite(suite: Suite, out_dir: Path, run_fn: RunFn | None = None, log: TextIO = sys.stderr,
              progress: bool = True) -> Outcome:
    """Run what is not yet done and append each run to runs.jsonl; the outcome's rows are the
    suite's latest (the caller writes the report: experiments/report.py reads this module)."""
    from tqdm import tqdm  # lazy: tqdm, only run_suite() needs it

    out_dir.mkdir(parents=True, exist_ok=True)
    runs_file = out_dir / "runs.jsonl"
    outcome = Outcome(suite, out_dir, started=time.time())
    done = {(r["definition"], r["key"], r["repeat"]) for r in load_rows(runs_file) if r.get("ok")}
    groups = []
    steps = plan(suite, out_dir)
    for d, p, reps in steps:
        todo = [r for r in reps if (d.name, p.key, r) not in done]
        outcome.skipped += len(reps) - len(todo)
        for chunk in ([todo] if shareable(p) else [[r] for r in todo]):
            if chunk:
                groups.append((d, p, chunk, estimate_seconds(p, len(chunk))))
    if outcome.skipped:
        print(f"resuming: {outcome.skipped} finished run(s) in {runs_file} are kept and skipped", file=log)
    run_fn = run_fn or (default_run_fn(out_dir) if groups else None)
    bar = tqdm(total=round(sum(g[3] for g in groups)), unit="s", file=log, disable=not progress or not groups,
               desc=suite.name, bar_format="{desc} {percentage:3.0f}%|{bar}| {n_fmt}/{total_fmt} est-s "
               "[{elapsed}<{remaining}] {postfix}")
    try:
        for d, p, reps, est in groups:
            bar.set_postfix_str(f"{d.name}: {p.label()}")
            for row in run_group(run_fn, d, p, reps):
                with runs_file.open("a") as f:
                    f.write(json.dumps(row, default=str) + "\n")
                outcome.ran += 1
                bar.update(round(est / len(reps)))
                bar.write(f"{d.name}: {p.label()} rep {row['repeat'] + 1}: {describe(row)}", file=log)
    except KeyboardInterrupt as exc:       # the run in progress cleaned up as it unwound
        outcome.interrupted = signum_of(exc)
    finally:
        bar.close()
    outcome.finished = time.time()
    # rows of points this suite still plans (an edited definition leaves older rows behind)
    planned = {(d.name, p.key, r) for d, p, reps in steps for r in reps}
    outcome.rows = [r for r in latest(load_rows(runs_file)) if (r["definition"], r["key"], r["repeat"]) in planned]
    return outcome


def latest(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per (definition, key, repeat): an ok row wins, else the most recent."""
    best: dict[tuple, dict] = {}
    for r in rows:
        k = (r["definition"], r["key"], r["repeat"])
        if k not in best or r.get("ok") or not best[k].get("ok"):
            best[k] = r
    return list(best.values())


def describe(row: dict[str, Any]) -> str:
    if not row.get("ok"):
        return f"FAILED: {row.get('error') or 'not ok'}"
    fid = row.get("fidelity") or {}
    bound = "CPU-BOUND" if fid.get("cpu_bound") else ("link-bound" if fid.get("link_bound") else "not link-bound")
    return f"{row['seconds']:.2f} s emulated, {bound} ({fid.get('reason', 'no fidelity record')})"
