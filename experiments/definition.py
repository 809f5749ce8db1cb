"""Experiment definitions: one YAML file per paper trend, validated into run points.

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
"""

from __future__ import annotations

import ast
import difflib
import hashlib
import itertools
import json
import operator
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Callable

import networkx as nx
import yaml

from controller import topologies
from emulation.fidelity import DEFAULT_CEILING_MBPS
from ground import wire
from ground.runspec import RunSpec
from experiments.units import Scale, UnitError, parse_rate, parse_size, parse_time

RUN_FIELDS = tuple(f.name for f in fields(RunSpec) if f.name not in ("length_override", "job"))
NETWORK_KEYS = ("link", "gradient", "oversubscription", "racks", "hosts_per_rack", "spines",
                "slow_fraction", "slow_factor", "delay")
TOP_KEYS = ("name", "title", "paper", "claim", "network", "emulated", "repeats", "run", "series",
            "sweep", "x", "plot", "claims", "notes", "program")
PROGRAMS = ("allreduce", "pace")
# program: pace - the keys of emulation/pace_run.py's PaceOptions a definition may set (the
# real link rate and the emulated gradient come from `network.link` and `emulated.gradient`)
PACE_KEYS = ("model", "scheduler", "partition_mb", "threshold_mb", "cycle_ms", "alpha_us", "plan_cost")
SCHEDULERS = ("fifo", "pace")
CLAIM_KEYS = ("text", "ratio", "paper", "expect", "tolerance", "for_each", "why", "bound")
# a claim's analytic bound on this network (experiments/bounds.py): wire_time (the ratio of
# its points' wire times, from their topology, rates and bytes) or pace_model (program: pace)
BOUND_KINDS = ("wire_time", "pace_model")
PLOTS = ("time", "speedup", "failures", "shares", "scale")
EXPECTS = ("about", "at_least", "at_most")
DTYPE_BYTES = 4


class ConfigError(ValueError):
    """An unusable definition: the file and the dotted key."""

    def __init__(self, source: str, key: str, problem: str):
        super().__init__(f"{source}: {key}: {problem}")


def ring_vs_innet(n: int) -> float:
    """Analytic ring / in-network time on one switch: ring moves 2(n-1)/n of the gradient over
    each host link, in-network 1x, each at its own wire efficiency (aggregation frame: K
    values under the Ethernet/IP/UDP/agg headers; TCP: a 1448 B segment in a 1514 B frame)."""
    innet = wire.DATA_BYTES / wire.FRAME_BYTES
    tcp = 1448 / 1514
    return 2 * (n - 1) / n * innet / tcp


_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
        ast.Div: operator.truediv, ast.Pow: operator.pow, ast.USub: operator.neg}
FUNCTIONS = {"ring_vs_innet": ring_vs_innet, "min": min, "max": max}


def evaluate(expr: Any, names: dict[str, Any]) -> float:
    """A claim's paper figure: a number, or arithmetic over the point's values (no eval)."""
    if isinstance(expr, (int, float)) and not isinstance(expr, bool):
        return float(expr)

    def walk(node):
        if isinstance(node, ast.Expression):
            return walk(node.body)
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
            return node.value
        if isinstance(node, ast.Name) and node.id in names:
            return names[node.id]
        if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
            return _OPS[type(node.op)](walk(node.left), walk(node.right))
        if isinstance(node, ast.UnaryOp) and type(node.op) in _OPS:
            return _OPS[type(node.op)](walk(node.operand))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in FUNCTIONS:
            return FUNCTIONS[node.func.id](*[walk(a) for a in node.args])
        raise ValueError(f"cannot evaluate {ast.unparse(node)!r} (numbers, + - * / **, "
                         f"{', '.join(FUNCTIONS)} and the names {', '.join(sorted(names))})")
    return float(walk(ast.parse(str(expr), mode="eval")))


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
    from pace.schedule import load_profile

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
            run.update(_network_for(run, net, scale.link_mbps(link), topo_dir))
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


def _network_for(run: dict, net: dict, link_mbps: float, topo_dir: Path) -> dict:
    """RunSpec fields for the network: `bw` for a generated topology, or a topology file
    written under topo_dir when links differ (oversubscribed uplinks, slow links). On a
    fat-tree, oversubscription slows the agg-core links (topologies.fat_tree's core_bw)."""
    topo = run.get("topology", "single")
    over = float(net.get("oversubscription") or 1)
    slow = float(net.get("slow_fraction") or 0)
    if topo not in ("leafspine",) and not slow and (topo != "fattree" or over == 1):
        return {"bw": link_mbps}
    workers = int(run.get("workers", 4))
    if topo == "leafspine":
        racks, spines = int(net.get("racks", 4)), int(net.get("spines", 2))
        per = int(net.get("hosts_per_rack", max(2, -(-workers // racks))))
        g = topologies.leaf_spine(racks, per, spines, host_bw=link_mbps,
                                  uplink_bw=link_mbps * per / (spines * over), workers=workers)
    elif topo == "fattree":
        g = topologies.fat_tree(run.get("k") or 4, bw=link_mbps, workers=workers, core_bw=link_mbps / over)
        topo = f"fattree-k{run.get('k') or 4}"
    else:
        raise ValueError(f"slow links need topology leafspine or fattree, not {topo!r}")
    if slow:
        _slow_down(g, slow, float(net.get("slow_factor", 0.25)))
    name = f"{topo}-w{workers}-o{over:g}-s{slow:g}x{float(net.get('slow_factor', 0.25)):g}-{link_mbps:.6g}.yaml"
    path = topo_dir / name
    topo_dir.mkdir(parents=True, exist_ok=True)
    path.write_text(topology_yaml(g))
    run.pop("k", None)
    return {"topology": str(path), "bw": None}


def _slow_down(g: nx.Graph, fraction: float, factor: float) -> None:
    """Every 1/fraction-th switch-to-switch link (in a fixed order) at `factor` of its rate:
    deterministic, so a rerun and every series see the same slow links."""
    fabric = sorted(((u, v) for u, v in g.edges if g.nodes[u]["kind"] == g.nodes[v]["kind"] == "switch"),
                    key=lambda e: (topologies.natural_key(e[0]), topologies.natural_key(e[1])))
    count = max(1, round(len(fabric) * fraction))
    step = len(fabric) / count
    for i in range(count):
        u, v = fabric[int(i * step)]
        g.edges[u, v]["bw"] = g.edges[u, v]["bw"] * factor
        g.edges[u, v]["slow"] = True


def topology_yaml(g: nx.Graph) -> str:
    """A graph in controller/topology_file.py's format (switch tiers, host ranks and racks)."""
    sw = [{"name": n, **({"tier": g.nodes[n]["tier"]} if "tier" in g.nodes[n] else {})}
          for n in topologies.switches(g)]
    hs = []
    for n in topologies.hosts(g):
        a = g.nodes[n]
        hs.append({"name": n, **({"rank": a["rank"]} if "rank" in a else {}),
                   **({"rack": a["rack"]} if "rack" in a else {})})
    links = [[u, v, None if e.get("bw") is None else round(float(e["bw"]), 6)] for u, v, e in g.edges(data=True)]
    return yaml.safe_dump({"name": g.graph.get("name", "generated"), "nodes": {"switches": sw, "hosts": hs},
                           "links": links}, sort_keys=False, default_flow_style=None)


# -- parsing ------------------------------------------------------------------------
def read_yaml(path: Path) -> Any:
    """A YAML file's content, or a ConfigError naming the file."""
    try:
        return yaml.safe_load(path.read_text())
    except OSError as exc:
        raise ConfigError(str(path), "<file>", f"cannot read: {exc.strerror or exc}") from exc
    except yaml.YAMLError as exc:
        raise ConfigError(str(path), "<file>", f"not valid YAML: {exc}") from exc


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
