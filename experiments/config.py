"""Experiment configs: YAML in, a validated `Config` out.

Why strict validation: a sweep takes minutes inside a VM, so a typo such as
`reapeats: 3` or `workers: [2, "4"]` must fail at once with the key path and
what is wrong, not after the network has been built ten times.  Unknown keys
are errors for the same reason (a misspelt key would silently use a default).

Layout (see configs/default.yaml):

    name: default            # results go to <out>/<name>/
    backend: soft            # soft | bmv2
    repeats: 2               # runs per point
    dtype: int32             # int32 | float32
    loss: 0.0                # drop probability per link direction, 0 <= p < 1
    window: null             # outstanding slots per worker, null = agent default
    seed: 0                  # base seed; repeat r uses seed + r
    sweep:
      workers: [2, 3, 4]     # worker counts, each at fixed.elements
      elements: [1024, 4096] # tensor sizes, each at fixed.workers
    fixed:
      elements: 262144
      workers: 8
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

BACKENDS = ("soft", "bmv2")
# Bytes per element on the wire: quantised float32 travels as int32.
DTYPE_BYTES = {"int32": 4, "float32": 4}
# The contribution bitmap is 32 bits wide (docs/design.md), so one switch
# aggregates at most 32 children.
MAX_WORKERS = 32
NAME_CHARS = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")

TOP_KEYS = ("name", "backend", "repeats", "dtype", "loss", "window", "seed", "sweep", "fixed")
SWEEP_KEYS = ("workers", "elements")
FIXED_KEYS = ("elements", "workers")
DEFAULTS = {"backend": "soft", "repeats": 1, "dtype": "int32", "loss": 0.0, "window": None, "seed": 0}

# Cost model from the brief, used only to keep configs inside their time budget:
# network set-up per run plus the pessimistic end of 1-4 s per 8-worker 1M-element allreduce.
SETUP_SECONDS = 3.0
SECONDS_PER_8W_1M = 4.0


class ConfigError(ValueError):
    """A config is unusable; `key` is the dotted path of the offending key."""

    def __init__(self, key: str, problem: str, source: str = "config"):
        self.key, self.problem, self.source = key, problem, source
        super().__init__(f"{source}: key '{key}': {problem}")


@dataclass(frozen=True)
class Point:
    """One (workers, elements) combination; `sweeps` says which plots it feeds."""

    workers: int
    elements: int
    sweeps: tuple[str, ...]

    def label(self) -> str:
        return f"workers={self.workers} elements={self.elements}"


@dataclass(frozen=True)
class Config:
    """A validated experiment; build it with `load_config` or `parse_config`."""

    name: str
    backend: str
    repeats: int
    dtype: str
    loss: float
    window: int | None
    seed: int
    sweep_workers: tuple[int, ...]
    sweep_elements: tuple[int, ...]
    fixed_elements: int
    fixed_workers: int
    source: str = field(default="config", compare=False)

    def points(self) -> list[Point]:
        """Distinct points: the workers sweep first, then the size sweep.

        A point in both sweeps (e.g. 8 workers at the fixed size) runs once and
        feeds both sets of plots, which keeps the run count down.
        """
        sweeps: dict[tuple[int, int], list[str]] = {}
        for w in self.sweep_workers:
            sweeps.setdefault((w, self.fixed_elements), []).append("workers")
        for e in self.sweep_elements:
            sweeps.setdefault((self.fixed_workers, e), []).append("elements")
        return [Point(w, e, tuple(dict.fromkeys(s))) for (w, e), s in sweeps.items()]

    def plan(self) -> list[tuple[int, Point]]:
        """(repeat, point) in run order: every point once, then again per repeat.

        Interleaving repeats (rather than running one point N times in a row)
        spreads slow drift of the machine, such as thermal throttling or a
        background job, across all points instead of biasing one of them.
        """
        return [(r, p) for r in range(self.repeats) for p in self.points()]

    def estimate_seconds(self) -> float:
        """Wall time of the whole plan under the brief's pessimistic cost model."""
        return sum(estimate_run_seconds(p) for _, p in self.plan())

    def as_dict(self) -> dict[str, Any]:
        """The config in its YAML layout, written next to the results."""
        return {
            "name": self.name, "backend": self.backend, "repeats": self.repeats,
            "dtype": self.dtype, "loss": self.loss, "window": self.window, "seed": self.seed,
            "sweep": {"workers": list(self.sweep_workers), "elements": list(self.sweep_elements)},
            "fixed": {"elements": self.fixed_elements, "workers": self.fixed_workers},
        }


def estimate_run_seconds(point: Point) -> float:
    """Set-up plus time proportional to the bytes all workers push through the switch."""
    return SETUP_SECONDS + SECONDS_PER_8W_1M * point.workers * point.elements / (8 * 2**20)


def load_config(path: str | Path, overrides: dict[str, Any] | None = None) -> Config:
    """Read a YAML file, apply command-line overrides, validate."""
    path = Path(path)
    source = str(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError("<file>", f"cannot read config: {exc.strerror or exc}", source) from exc
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError("<file>", f"not valid YAML: {exc}", source) from exc
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ConfigError("<top>", f"must be a mapping of keys, got {_kind(raw)}", source)
    if "name" not in raw:
        raw["name"] = path.stem
    return parse_config(raw, overrides, source)


def parse_config(raw: dict[str, Any], overrides: dict[str, Any] | None = None,
                 source: str = "config") -> Config:
    """Validate a config mapping; overrides (already parsed values) win over the file."""
    raw = dict(raw)
    for key, value in (overrides or {}).items():
        if value is not None:
            raw[key] = value
    _no_unknown(raw, TOP_KEYS, "", source)
    for key in ("name", "sweep", "fixed"):
        if key not in raw:
            raise ConfigError(key, "is required", source)
    values = {**DEFAULTS, **raw}

    name = values["name"]
    if not isinstance(name, str) or not name or not set(name) <= NAME_CHARS or name.startswith("."):
        raise ConfigError("name", f"must be a non-empty name of letters, digits, '.', '_' or '-' "
                                  f"(it becomes a directory), got {name!r}", source)
    backend = values["backend"]
    if backend not in BACKENDS:
        raise ConfigError("backend", f"must be one of {', '.join(BACKENDS)}, got {backend!r}", source)
    dtype = values["dtype"]
    if dtype not in DTYPE_BYTES:
        raise ConfigError("dtype", f"must be one of {', '.join(DTYPE_BYTES)}, got {dtype!r}", source)
    repeats = _int(values["repeats"], "repeats", 1, None, source)
    seed = _int(values["seed"], "seed", 0, None, source)
    window = None if values["window"] is None else _int(values["window"], "window", 1, None, source)
    loss = values["loss"]
    if isinstance(loss, bool) or not isinstance(loss, (int, float)) or not 0.0 <= loss < 1.0:
        raise ConfigError("loss", f"must be a number with 0 <= loss < 1, got {loss!r}", source)

    sweep = _mapping(raw["sweep"], "sweep", SWEEP_KEYS, source)
    fixed = _mapping(raw["fixed"], "fixed", FIXED_KEYS, source)
    workers = _int_list(sweep, "workers", "sweep", 2, MAX_WORKERS, source)
    elements = _int_list(sweep, "elements", "sweep", 1, None, source)
    fixed_elements = _int(_get(fixed, "elements", "fixed", source), "fixed.elements", 1, None, source)
    fixed_workers = _int(_get(fixed, "workers", "fixed", source), "fixed.workers", 2, MAX_WORKERS, source)
    return Config(name=name, backend=backend, repeats=repeats, dtype=dtype, loss=float(loss),
                  window=window, seed=seed, sweep_workers=tuple(workers),
                  sweep_elements=tuple(elements), fixed_elements=fixed_elements,
                  fixed_workers=fixed_workers, source=source)


def _kind(value: Any) -> str:
    return "null" if value is None else type(value).__name__


def _no_unknown(mapping: dict, allowed: tuple[str, ...], prefix: str, source: str) -> None:
    for key in mapping:
        if key not in allowed:
            path = f"{prefix}{key}"
            near = difflib.get_close_matches(str(key), allowed, n=1)
            hint = f"; did you mean '{prefix}{near[0]}'?" if near else ""
            raise ConfigError(path, f"unknown key (allowed: {', '.join(allowed)}){hint}", source)


def _mapping(value: Any, key: str, allowed: tuple[str, ...], source: str) -> dict:
    if not isinstance(value, dict):
        raise ConfigError(key, f"must be a mapping with keys {', '.join(allowed)}, got {_kind(value)}", source)
    _no_unknown(value, allowed, f"{key}.", source)
    return value


def _get(mapping: dict, key: str, prefix: str, source: str) -> Any:
    if key not in mapping:
        raise ConfigError(f"{prefix}.{key}", "is required", source)
    return mapping[key]


def _int(value: Any, key: str, low: int, high: int | None, source: str) -> int:
    """An int in [low, high]; bools are rejected although Python counts them as ints."""
    bounds = f">= {low}" if high is None else f"between {low} and {high}"
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(key, f"must be an integer {bounds}, got {value!r} ({_kind(value)})", source)
    if value < low or (high is not None and value > high):
        raise ConfigError(key, f"must be an integer {bounds}, got {value}", source)
    return value


def _int_list(mapping: dict, key: str, prefix: str, low: int, high: int | None, source: str) -> list[int]:
    value = _get(mapping, key, prefix, source)
    path = f"{prefix}.{key}"
    if not isinstance(value, list) or not value:
        raise ConfigError(path, f"must be a non-empty list of integers, got {value!r}", source)
    items = [_int(v, f"{path}[{i}]", low, high, source) for i, v in enumerate(value)]
    if len(set(items)) != len(items):
        raise ConfigError(path, f"has duplicate values: {value}", source)
    return items
