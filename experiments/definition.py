"""A validated experiment definition: its labelled points, each one RunSpec at the network's scale, and its claims.

Why these types: a definition names a trend on a real network (100 Gb/s links, a 100 MB
gradient) that the emulator runs scaled down; `Definition.points` turns every series at every
sweep combination into a `Point` whose RunSpec carries the scaled size and rates (and, for
`program: pace`, a `ProgramRun`), and `Definition.claims` expands the paper's claims over
their for_each keys. The runner, the analysis, the plots and the report work on these types.
The file format and its validation are experiments/definition_file.py; the networks written
for uneven links experiments/networks.py; a claim's paper figure experiments/paper_figures.py.
"""

from __future__ import annotations

import hashlib
import itertools
import json
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Callable

from agglab.controller import topologies
from agglab.emulation.fidelity import DEFAULT_CEILING_MBPS
from agglab.emulation.training_jobs import profile_compute_ms
from agglab.ground import wire
from agglab.ground.runspec import RunSpec
from agglab.experiments.networks import network_for
from agglab.experiments.paper_figures import evaluate
from agglab.experiments.units import Scale, parse_rate, parse_size
from agglab.pace.schedule import load_profile

RUN_FIELDS = tuple(f.name for f in fields(RunSpec) if f.name not in ("length_override", "job"))
NETWORK_KEYS = ("link", "gradient", "oversubscription", "racks", "hosts_per_rack", "spines",
                "slow_fraction", "slow_factor", "delay")
# program: pace - the keys of emulation/pace_run.py's PaceOptions a definition may set (the
# real link rate and the emulated gradient come from `network.link` and `emulated.gradient`)
PACE_KEYS = ("model", "scheduler", "partition_mb", "threshold_mb", "cycle_ms", "alpha_us", "plan_cost")
SCHEDULERS = ("fifo", "pace")
DTYPE_BYTES = 4


class ConfigError(ValueError):
    """An unusable definition: the file and the dotted key."""

    def __init__(self, source: str, key: str, problem: str):
        super().__init__(f"{source}: {key}: {problem}")


@dataclass
class Point:
    """One labelled point: a series at one combination of sweep values."""
    series: str
    values: dict[str, Any]             # the sweep values (what the plots and claims select on)
    spec: RunSpec | None               # None when the point cannot run (see `error`)
    error: str = ""
    scale: Scale | None = None
    network: dict[str, Any] = field(default_factory=dict)
    program: dict[str, Any] = field(default_factory=dict)   # program: pace - its PACE_KEYS

    @property
    def key(self) -> str:
        """Identity of the run: equal RunSpecs (and program options) share one run (and its
        resume record)."""
        what = ({**self.spec.to_dict(), **({"program": self.program} if self.program else {})} if self.spec
                else {"error": self.error, "series": self.series, **{k: str(v) for k, v in self.values.items()}})
        text = json.dumps(what, sort_keys=True, default=str)
        return hashlib.sha1(text.encode()).hexdigest()[:12]

    def runnable(self, seed: int) -> "RunSpec | ProgramRun":
        """What the run function receives for one repeat: a RunSpec (one allreduce) or a
        ProgramRun (program: pace)."""
        spec = self.spec.with_(seed=seed)
        if not self.program:
            return spec
        return ProgramRun("pace", spec, tuple(sorted(self.program.items())))

    def label(self) -> str:
        vals = " ".join(f"{k}={_show(v)}" for k, v in self.values.items())
        return f"{self.series} {vals}".strip()


def _show(v: Any) -> str:
    if isinstance(v, list):
        return ",".join(map(str, v)) or "none"
    return str(v)


@dataclass(frozen=True)
class ProgramRun:
    """One run of a program other than a single allreduce (program: pace): the network and
    algorithm in `spec`, the program's options (PACE_KEYS plus link_gbps, emulated_mb)."""
    program: str
    spec: RunSpec
    options: tuple[tuple[str, Any], ...]

    @property
    def seed(self) -> int:
        return self.spec.seed

    def option(self, name: str, default: Any = None) -> Any:
        return dict(self.options).get(name, default)

    def with_(self, **changes) -> "ProgramRun":
        return replace(self, spec=self.spec.with_(**changes))

    def to_dict(self) -> dict[str, Any]:
        return {**self.spec.to_dict(), "program": self.program, **dict(self.options)}


def model_bytes(model: str) -> int:
    """A layer profile's gradient per worker and iteration (float32)."""
    return sum(x.nbytes for x in load_profile(model).layers)


@dataclass
class Claim:
    text: str
    num: dict[str, Any]
    den: dict[str, Any]
    paper: float
    expect: str
    tolerance: float
    why: str = ""          # why this network may not reach the paper's figure (shown unless it holds)
    bound: str = ""        # BOUND_KINDS: how this network's own bound is computed ("" = none)
    base: str = ""         # the text before for_each expansion: claims of one line of a scale plot


@dataclass
class Definition:
    name: str
    title: str
    paper: str
    claim: str
    network: dict[str, Any]
    repeats: int
    series: dict[str, dict[str, Any]]
    sweep: dict[str, list]
    x: str | None
    plot: str
    claims_raw: list[dict]
    notes: str
    run: dict[str, Any]
    emulated_bytes: int
    source: str
    program: str = "allreduce"
    # per scale (`emulated.gradient` keyed by workers): each worker count's own emulated
    # gradient, run at that count's own calibrated ceiling; {} = one size and one ceiling
    emulated_sizes: dict[int, int] = field(default_factory=dict)
    built: list[Point] = field(default_factory=list)     # the labelled points of the last plan

    # -- the points ---------------------------------------------------------------
    def combos(self) -> list[dict[str, Any]]:
        keys = list(self.sweep)
        return [dict(zip(keys, vals)) for vals in itertools.product(*(self.sweep[k] for k in keys))]

    def fastest_link(self) -> float:
        rates = [parse_rate(self.network["link"])]
        for values in [self.run, *self.series.values(), *({"bw": b} for b in self.sweep.get("bw", []))]:
            if "bw" in values:
                rates.append(parse_rate(values["bw"]))
        return max(rates)

    def emulated_for(self, ceiling_mbps: float, workers: int | None = None) -> int:
        """The emulated gradient is written for a 5 Mb/s ceiling; under a lower ceiling it
        shrinks with it (whole blocks of K), so a run keeps about the same wire time. Per
        scale, `workers` picks the size written for that many workers."""
        written = self.emulated_sizes[workers] if self.emulated_sizes else self.emulated_bytes
        shrink = min(1.0, ceiling_mbps / DEFAULT_CEILING_MBPS)
        per_block = wire.K * DTYPE_BYTES
        return max(per_block, int(written * shrink) // per_block * per_block)

    def scale(self, ceiling_mbps: float, real_bytes: int | None = None, workers: int | None = None) -> Scale:
        real = real_bytes if real_bytes is not None else parse_size(self.network["gradient"])
        return Scale.fit(self.fastest_link(), ceiling_mbps * 1e6, real, self.emulated_for(ceiling_mbps, workers))

    def points(self, ceiling_mbps: float, topo_dir: Path,
               ceiling_of: Callable[[int], float] | None = None) -> list[Point]:
        """Every labelled point. Per scale (`emulated_sizes`), each point's scale comes from its
        own worker count: `ceiling_of(workers)` (default: `ceiling_mbps` for all) and the size
        written for that count, so 8 workers are not slowed to the rate 128 need."""
        scale = None if self.program == "pace" or self.emulated_sizes else self.scale(ceiling_mbps)
        out = []
        for combo in self.combos():
            for label, overrides in self.series.items():
                merged = {**self.run, **combo, **overrides}
                if self.program == "pace":
                    out.append(self._pace_point(label, combo, merged, ceiling_mbps))
                    continue
                if self.emulated_sizes:
                    workers = int(merged.get("workers", 4))
                    if workers not in self.emulated_sizes:
                        raise ConfigError(self.source, "emulated.gradient", f"has no size for {workers} workers "
                                          f"(point {label} {combo}); sizes are given for "
                                          f"{', '.join(map(str, sorted(self.emulated_sizes)))}")
                    scale = self.scale(ceiling_of(workers) if ceiling_of else ceiling_mbps, workers=workers)
                out.append(self._point(label, combo, merged, scale, topo_dir))
        self.built = out
        return out

    def _pace_point(self, label: str, combo: dict, merged: dict, ceiling_mbps: float) -> Point:
        """One scheduler on one model: the scale is the model's (its gradient over the
        emulated one); the network is the definition's, every link at the scaled rate."""
        pace = {k: v for k, v in merged.items() if k in PACE_KEYS}
        run = {k: v for k, v in merged.items() if k in RUN_FIELDS}
        where = f"point {label} {combo}"
        if pace.get("scheduler") not in SCHEDULERS:
            raise ConfigError(self.source, where, f"scheduler must be one of {', '.join(SCHEDULERS)}, "
                              f"got {pace.get('scheduler')!r}")
        try:
            real = model_bytes(str(pace.get("model")))
        except (ValueError, OSError, KeyError) as exc:
            raise ConfigError(self.source, f"{where}: model", str(exc)) from exc
        scale = self.scale(ceiling_mbps, real)
        link = parse_rate(run.pop("bw", self.network["link"]))
        run["bw"] = scale.link_mbps(link)
        run["seed"] = run.get("seed", 0)
        try:
            spec = RunSpec(**run).validate()
        except (ValueError, TypeError) as exc:
            raise ConfigError(self.source, where, str(exc)) from exc
        pace.update(link_gbps=link / 1e9, emulated_mb=self.emulated_for(ceiling_mbps) / 2**20)
        return Point(label, combo, spec, "", scale, dict(self.network), pace)

    def _point(self, label: str, combo: dict, merged: dict, scale: Scale, topo_dir: Path) -> Point:
        net = {**self.network, **{k: v for k, v in merged.items() if k in NETWORK_KEYS}}
        run = {k: v for k, v in merged.items() if k in RUN_FIELDS}
        link = parse_rate(run.pop("bw", net["link"]))
        run.setdefault("elements", max(1, round(parse_size(net["gradient"]) / scale.size) // DTYPE_BYTES))
        run["seed"] = run.get("seed", 0)
        try:
            run.update(network_for(run, net, scale.link_mbps(link), topo_dir))
            if run.get("compute_profile") and run.get("bw") is None:
                # a topology file carries its links' rates (no --bw), and a profile's compute is
                # scaled to the hosts' rate (emulation/training_jobs.py): resolved here from it
                run["compute_ms"] = round(profile_compute_ms(run.pop("compute_profile"), scale.link_mbps(link),
                                                             run["elements"]), 3)
            spec = RunSpec(**run).validate()
        except (ValueError, TypeError, topologies.TopologyError) as exc:
            raise ConfigError(self.source, f"point {label} {combo}", str(exc)) from exc
        return Point(label, combo, spec, "", scale, net)

    def claims(self) -> list[tuple[Claim, dict[str, Any]]]:
        """Claims expanded over their for_each keys: (claim, the values it was expanded with)."""
        out = []
        for i, raw in enumerate(self.claims_raw):
            each = raw.get("for_each") or []
            each = [each] if isinstance(each, str) else list(each)
            for vals in itertools.product(*(self.sweep[k] for k in each)):
                bound = dict(zip(each, vals))
                num, den = ({**sel, **bound} for sel in raw["ratio"])
                names = {**{k: v for k, v in {**self.run, **num}.items() if _is_num(v)}, **bound}
                try:
                    paper = evaluate(raw["paper"], names)
                except (ValueError, ZeroDivisionError, TypeError, SyntaxError) as exc:
                    raise ConfigError(self.source, f"claims[{i}].paper", str(exc)) from exc
                text = raw["text"] + ("" if not bound else " (" + ", ".join(f"{k}={v}" for k, v in bound.items()) + ")")
                out.append((Claim(text, num, den, paper, raw.get("expect", "about"),
                                  float(raw.get("tolerance", 0.2)), " ".join(str(raw.get("why", "")).split()),
                                  str(raw.get("bound", "pace_model" if self.program == "pace" else "wire_time")),
                                  raw["text"]),
                            bound))
        return out


def _is_num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)
