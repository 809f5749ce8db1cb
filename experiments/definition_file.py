"""Experiment definition files: one YAML file per paper trend, read and validated into a Definition.

Why this shape: a trend is a comparison (series: in-network vs ring vs PS) along an axis
(sweep: workers, density, oversubscription...) on a real network (100 Gb/s links, a 100 MB
gradient), checked against a paper's claim. Every key of `run`, `series` and `sweep` is
either a `RunSpec` field (ground/runspec.py: topology, k, workers, elements, dtype,
algorithm, tree, density, pattern, loss, fail, ...) or a network key below; each point
becomes one validated RunSpec, so nothing restates the emulator's options. Layout:

    name: switchml
    title: SwitchML - allreduce time vs workers
    paper: SwitchML (NSDI'21)
    claim: time stays flat as workers grow; ring grows      # the paper's words and numbers
    network:                     # the real network
      link: 100Gbps              # every link (leaf-spine: the host links)
      gradient: 100MB            # per worker
      oversubscription: 2        # leaf-spine only: rack uplink capacity = host capacity / this
      racks: 4, hosts_per_rack: 2, spines: 2     # leaf-spine shape
      slow_fraction: 0.25        # this share of the switch-to-switch links ...
      slow_factor: 0.25          # ... runs at this fraction of `link`
      delay: 1us                 # noted, not emulated (experiments/units.py DELAY_NOTE)
    emulated: {gradient: 512KiB} # what actually runs (the size scale z)
    # or per scale: each worker count its own size, and its own calibrated rate ceiling
    # (the smallest calibrated shape with at least that many workers, `agglab calibrate`)
    # emulated: {gradient: {8: 4MiB, 32: 2MiB, 128: 1MiB}}
    repeats: 2
    run: {topology: single, dtype: int32}        # fixed for every point
    series:                      # one line per entry
      in-network: {algorithm: switchml}
      ring: {algorithm: ring}
    sweep: {workers: [2, 4, 8]}  # cartesian product
    x: workers                   # the plot's axis; `plot`: time | speedup | failures | shares
    claims:                      # each: a ratio of two median times, beside the paper's figure
      - text: ring vs in-network at 8 workers
        ratio: [{series: ring, workers: 8}, {series: in-network, workers: 8}]
        paper: ring_vs_innet(8)  # a number or an expression (for_each keys, workers, ...)
        expect: about            # about | at_least | at_most
        tolerance: 0.1
        why: ...                 # optional: why this network may fall short (shown unless it holds)
        bound: wire_time         # this network's analytic bound (experiments/bounds.py), beside ours
                                 # (the default; program: pace defaults to pace_model)

Points with the same RunSpec (e.g. ring, whose time does not depend on density) run once
and serve every label that maps to them.

`program: pace` makes every point one training iteration instead of one allreduce
(emulation/pace_run.py, `agglab train --profile-only`): `run`, `series` and `sweep` may
then also name PACE_KEYS (`model`: a layer profile, `scheduler`: fifo | pace, and the
scheduler options), `network.gradient` is the model's own (so it is not written), and
`emulated.gradient` is what one worker sends per iteration through the emulator; the
scale is then per model (its gradient over the emulated one).

Why this module apart from experiments/definition.py: this is the file format, every key a
file may hold and the error that names a wrong one; what a valid definition then means (its
points, scaled, and its claims) is definition.py's.
"""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Any

import yaml

from agglab.experiments.definition import NETWORK_KEYS, PACE_KEYS, RUN_FIELDS, ConfigError, Definition
from agglab.experiments.units import UnitError, parse_rate, parse_size, parse_time

TOP_KEYS = ("name", "title", "paper", "claim", "network", "emulated", "repeats", "run", "series",
            "sweep", "x", "plot", "claims", "notes", "program")
PROGRAMS = ("allreduce", "pace")
CLAIM_KEYS = ("text", "ratio", "paper", "expect", "tolerance", "for_each", "why", "bound", "where")
# where: the knobs the paper's setting differs in, each swept by the wire model (experiments/where.py)
WHERE_KEYS = ("knob", "values", "why", "with")
# a claim's analytic bound on this network (experiments/bounds.py): wire_time (the ratio of
# its points' wire times, from their topology, rates and bytes), training (jobs that train:
# compute, and calls limited by bytes or by the window's measured round trips) or pace_model
# (program: pace)
BOUND_KINDS = ("wire_time", "pace_model", "training")
PLOTS = ("time", "speedup", "failures", "shares", "scale")
EXPECTS = ("about", "at_least", "at_most")


def read_yaml(path: Path) -> Any:
    """A YAML file's content, or a ConfigError naming the file."""
    try:
        return yaml.safe_load(path.read_text())
    except OSError as exc:
        raise ConfigError(str(path), "<file>", f"cannot read: {exc.strerror or exc}") from exc
    except UnicodeDecodeError:
        raise ConfigError(str(path), "<file>", "not a text file (not UTF-8)") from None
    except yaml.YAMLError as exc:     # PyYAML's message spans lines (a caret under the spot): its first line
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ConfigError(str(path), "<file>", f"not valid YAML{where}: {problem}") from None


def load_definition(path: str | Path, overrides: dict[str, Any] | None = None) -> Definition:
    path = Path(path)
    return parse_definition(read_yaml(path), str(path), overrides)


def parse_definition(raw: Any, source: str = "definition", overrides: dict[str, Any] | None = None) -> Definition:
    """Validate a definition mapping; `overrides` (a suite's) replace top keys, and a
    `sweep` override replaces only the sweep keys it names."""
    if not isinstance(raw, dict):
        raise ConfigError(source, "<top>", "must be a mapping")
    raw = dict(raw)
    for key, value in (overrides or {}).items():
        raw[key] = {**raw.get("sweep", {}), **value} if key == "sweep" else value
    _known(raw, TOP_KEYS, "", source)
    for key in ("name", "network", "series", "sweep", "emulated"):
        if key not in raw:
            raise ConfigError(source, key, "is required")
    program = raw.get("program", "allreduce")
    if program not in PROGRAMS:
        raise ConfigError(source, "program", f"must be one of {', '.join(PROGRAMS)}, got {program!r}")
    network = _mapping(raw["network"], "network", NETWORK_KEYS, source)
    for key in ("link", "gradient") if program == "allreduce" else ("link",):
        if key not in network:
            raise ConfigError(source, f"network.{key}", "is required (e.g. link: 100Gbps, gradient: 100MB)")
    if program == "pace" and "gradient" in network:
        raise ConfigError(source, "network.gradient", "program: pace takes each model's own gradient")
    try:
        parse_rate(network["link"])
        if "gradient" in network:
            parse_size(network["gradient"])
        if "delay" in network:
            parse_time(network["delay"])
        emulated = _mapping(raw["emulated"], "emulated", ("gradient",), source)
        emulated_sizes = _per_scale(emulated.get("gradient"), program, source)
        emulated_bytes = (max(emulated_sizes.values()) if emulated_sizes
                          else parse_size(emulated.get("gradient", "256KiB")))
    except UnitError as exc:
        raise ConfigError(source, "network", str(exc)) from exc
    allowed = RUN_FIELDS + NETWORK_KEYS + (PACE_KEYS if program == "pace" else ())
    run = _mapping(raw.get("run", {}), "run", allowed, source)
    series = raw["series"]
    if not isinstance(series, dict) or not series:
        raise ConfigError(source, "series", "must map each line's label to its fields, e.g. ring: {algorithm: ring}")
    series = {str(k): _mapping(v or {}, f"series.{k}", allowed, source) for k, v in series.items()}
    sweep = _mapping(raw["sweep"], "sweep", allowed, source)
    for key, values in sweep.items():
        if not isinstance(values, list) or not values:
            raise ConfigError(source, f"sweep.{key}", f"must be a non-empty list, got {values!r}")
    repeats = raw.get("repeats", 2)
    if not isinstance(repeats, int) or isinstance(repeats, bool) or repeats < 1:
        raise ConfigError(source, "repeats", f"must be an integer >= 1, got {repeats!r}")
    plot = raw.get("plot", "time")
    if plot not in PLOTS:
        raise ConfigError(source, "plot", f"must be one of {', '.join(PLOTS)}, got {plot!r}")
    x = raw.get("x", next(iter(sweep), None))
    if x is not None and x not in sweep:
        raise ConfigError(source, "x", f"must be a sweep key ({', '.join(sweep)}), got {x!r}")
    claims = raw.get("claims", [])
    if not isinstance(claims, list):
        raise ConfigError(source, "claims", "must be a list")
    for i, c in enumerate(claims):
        c = _mapping(c, f"claims[{i}]", CLAIM_KEYS, source)
        for key in ("text", "ratio", "paper"):
            if key not in c:
                raise ConfigError(source, f"claims[{i}].{key}", "is required")
        if not (isinstance(c["ratio"], list) and len(c["ratio"]) == 2 and all(isinstance(s, dict) for s in c["ratio"])):
            raise ConfigError(source, f"claims[{i}].ratio", "must be [numerator selector, denominator selector]")
        if c.get("bound", BOUND_KINDS[0]) not in BOUND_KINDS:
            raise ConfigError(source, f"claims[{i}].bound", f"must be one of {', '.join(BOUND_KINDS)}")
        if c.get("bound") == "pace_model" and program != "pace":
            raise ConfigError(source, f"claims[{i}].bound", "pace_model needs program: pace")
        if c.get("expect", "about") not in EXPECTS:
            raise ConfigError(source, f"claims[{i}].expect", f"must be one of {', '.join(EXPECTS)}")
        for sel in c["ratio"]:
            if sel.get("series", next(iter(series))) not in series:
                raise ConfigError(source, f"claims[{i}].ratio", f"unknown series {sel.get('series')!r}")
        _where(c.get("where"), f"claims[{i}].where", allowed, source)
        each = c.get("for_each") or []
        for k in [each] if isinstance(each, str) else each:
            if k not in sweep:
                raise ConfigError(source, f"claims[{i}].for_each", f"{k!r} is not a sweep key")
    d = Definition(name=str(raw["name"]), title=str(raw.get("title", raw["name"])), paper=str(raw.get("paper", "")),
                   claim=str(raw.get("claim", "")).strip(), network=network, repeats=repeats, series=series,
                   sweep=sweep, x=x, plot=plot, claims_raw=claims, notes=str(raw.get("notes", "")).strip(),
                   run=run, emulated_bytes=emulated_bytes, source=source, program=program,
                   emulated_sizes=emulated_sizes)
    d.claims()                      # evaluates every paper expression once: errors now, not after the runs
    return d


def _per_scale(value: Any, program: str, source: str) -> dict[int, int]:
    """`emulated.gradient` keyed by workers ({8: 4MiB, 128: 1MiB}), parsed; {} for one size."""
    if not isinstance(value, dict):
        return {}
    if program != "allreduce":
        raise ConfigError(source, "emulated.gradient", "a size per worker count needs program: allreduce")
    if not value:
        raise ConfigError(source, "emulated.gradient", "is an empty mapping (give workers: size, e.g. {8: 1MiB})")
    out = {}
    for workers, size in value.items():
        if not isinstance(workers, int) or isinstance(workers, bool) or workers < 1:
            raise ConfigError(source, f"emulated.gradient.{workers}", "keys must be worker counts (integers >= 1)")
        out[workers] = parse_size(size)
    return out


def _where(value: Any, key: str, knobs: tuple[str, ...], source: str) -> None:
    """A claim's `where`: a list of {knob: a run or network key, values: a non-empty list}."""
    if value is None:
        return
    if not isinstance(value, list):
        raise ConfigError(source, key, "must be a list of {knob: KEY, values: [...]}")
    for j, w in enumerate(value):
        w = _mapping(w, f"{key}[{j}]", WHERE_KEYS, source)
        if w.get("knob") not in knobs:
            raise ConfigError(source, f"{key}[{j}].knob", f"must be a run or network key{' or a PACE option' if 'alpha_us' in knobs else ''}, "
                              f"got {w.get('knob')!r}")
        if not isinstance(w.get("values"), list) or not w["values"]:
            raise ConfigError(source, f"{key}[{j}].values", f"must be a non-empty list, got {w.get('values')!r}")
        _mapping(w.get("with", {}), f"{key}[{j}].with", knobs, source)


def _known(mapping: dict, allowed: tuple[str, ...], prefix: str, source: str) -> None:
    for key in mapping:
        if key not in allowed:
            near = difflib.get_close_matches(str(key), allowed, n=1)
            hint = f"; did you mean {prefix}{near[0]}?" if near else ""
            raise ConfigError(source, f"{prefix}{key}", f"unknown key{hint}")


def _mapping(value: Any, key: str, allowed: tuple[str, ...], source: str) -> dict:
    if not isinstance(value, dict):
        raise ConfigError(source, key, f"must be a mapping, got {type(value).__name__}")
    _known(value, allowed, f"{key}.", source)
    return dict(value)
