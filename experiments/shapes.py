"""Each trend's calibration shape: the network and pipeline whose ceiling its runs need.

Why: a backend's ceiling is where its CPU still keeps up with the links, and what it must
keep up with depends on the trend, not only on its worker count. On BMv2 a frame crosses
every switch on its tree (four on a leaf-spine, up to six on a k=4 fat-tree) and the sparse
pipeline costs each switch more per frame than the dense one, so trends calibrated on 8
workers on one switch ran CPU-bound (`make experiment BACKEND=bmv2`, 2026-12-06: 25 of 108
runs flagged: omnireduce's sparse points, rat_failures, bml, atp). A trend's shape is read
from its definition (run, sweep combinations, series): the network of its in-network series
(the switches' work; ring and PS only forward), its most workers (all jobs together), and the
scheme when it is the sparse one. `agglab calibrate` measures a shape, agglab.emulation.fidelity
stores it under shape_key, and agglab.experiments.runner.trend_ceiling runs the trend at its own.
"""

from __future__ import annotations

from agglab.emulation.fidelity import SOFT, host_ceiling, shape_key, shape_record
from agglab.controller import topologies
from agglab.controller.topology import switches
from agglab.experiments.definition import Definition
from agglab.ground.runspec import RunSpec
from agglab.ground.schemes import DEFAULT as DEFAULT_SCHEME, HOST_BASELINES, SCHEMES

TREE_TOPOLOGIES = ("fattree", "bcube", "leafspine")
# Fewer workers than this on one switch (dense or sparse) are covered by the default calibration
# of 8 workers: less traffic through the same one switch
DEFAULT_WORKERS = 8


def _configs(d: Definition) -> list[dict]:
    return [{**d.run, **combo, **over} for combo in d.combos() for over in (d.series.values() or [{}])]


def _in_network(c: dict) -> bool:
    row = SCHEMES.get(c.get("algorithm", DEFAULT_SCHEME))
    return bool(row and row.in_network)


def trend_shape(d: Definition) -> dict:
    """{topology, k, workers, tree, scheme[, density]} of trend `d`: the network of its first
    in-network series (all series when none is), its most workers times jobs on that
    network, scheme `sparse` (with the trend's lowest density below 1) when any in-network
    point runs a sparse scheme, else `dense`. One switch with at most 8 workers is the
    default shape (single, 8 workers)."""
    configs = _configs(d)
    own = [c for c in configs if _in_network(c)] or configs
    first = own[0]
    topology = str(first.get("topology", "single"))
    same = [c for c in own if str(c.get("topology", "single")) == topology]
    workers = max(int(c.get("workers", 4)) * int(c.get("jobs", 1)) for c in same)
    sparse = [c for c in same if SCHEMES[c.get("algorithm", DEFAULT_SCHEME)].sparse]
    shape = {"topology": topology, "k": first.get("k") if topology in ("fattree", "bcube") else None,
             "workers": workers, "tree": first.get("tree") if topology in TREE_TOPOLOGIES else None,
             "scheme": "sparse" if sparse else "dense"}
    if topology == "single":
        shape["workers"] = max(workers, DEFAULT_WORKERS)
    if sparse:
        below = [float(c["density"]) for c in sparse if float(c.get("density", 1.0)) < 1.0]
        shape["density"] = min(below, default=0.1)
    return shape


def host_trend_ceiling(d: Definition, backend: str = SOFT) -> float | None:
    """The own ceiling (Mb/s) of a trend whose every series is a host baseline (ring, ps):
    the lowest of its schemes' calibrated ceilings on its network with its most workers
    (`agglab calibrate --scheme ring ...`), None when it has an in-network series or one of
    its schemes was not calibrated there. Why: 128 agents' TCP costs the machine other CPU
    than the switches' pipeline, so the in-network ceiling does not say where they stay
    faithful (ring and PS at 128 workers ran CPU-bound at it, docs/measurements.md)."""
    configs = _configs(d)
    if any(_in_network(c) for c in configs):
        return None
    schemes = sorted({str(c.get("algorithm")) for c in configs})
    if not set(schemes) <= set(HOST_BASELINES):
        return None
    topology = str(configs[0].get("topology", "single"))
    workers = max(int(c.get("workers", 4)) for c in configs)
    k = configs[0].get("k") if topology in ("fattree", "bcube") else None
    return host_ceiling(topology, workers, k, schemes, backend)


def key_of(shape: dict) -> str:
    """The calibration file's name of a shape (agglab.emulation.fidelity.shape_key)."""
    return shape_key(shape["topology"], shape["workers"], shape.get("k"), shape.get("tree"), shape.get("scheme"))


def is_default(shape: dict) -> bool:
    """The default calibration's own shape: 8 dense workers on one switch."""
    return key_of(shape) == shape_key("single", DEFAULT_WORKERS)


def calibrated_by_shape(suite) -> bool:
    """Whether the suite's trends run at their own shapes' ceilings: on BMv2 (the soft
    backend keeps its rule: the smallest calibrated shape covering the workers), unless the
    suite fixes its ceiling."""
    return suite.backend != SOFT and not suite.ceiling_source.startswith("fixed by")


def suite_shapes(suite) -> dict[str, tuple[dict, list[str]]]:
    """key -> (shape, the trends that map to it) over the suite's trends (per-scale ones, which
    run each size at its own calibrated size, excluded), in the suite's order."""
    out: dict[str, tuple[dict, list[str]]] = {}
    for d in suite.definitions:
        if d.emulated_sizes:
            continue
        shape = trend_shape(d)
        out.setdefault(key_of(shape), (shape, []))[1].append(d.name)
    return out


def uncalibrated_shapes(suite) -> list[tuple[str, dict, list[str]]]:
    """(key, shape, trends) of every trend shape other than the default that the suite's
    backend has never searched: what a BMv2 suite calibrates before it runs. A shape whose
    search found no faithful rate is not searched again (faithless_shapes)."""
    if not calibrated_by_shape(suite):
        return []
    return [(key, shape, names) for key, (shape, names) in suite_shapes(suite).items()
            if not is_default(shape) and shape_record(key, suite.backend) is None]


def faithless_shapes(suite) -> list[tuple[str, dict, list[str]]]:
    """(key, search record, trends) of every trend shape whose stored search found no faithful
    rate on this machine: their trends run at the suite's ceiling, flagged where CPU-bound."""
    if not calibrated_by_shape(suite):
        return []
    out = []
    for key, (_, names) in suite_shapes(suite).items():
        record = shape_record(key, suite.backend)
        if record is not None and not record.get("ceiling_mbps"):
            out.append((key, record, names))
    return out


def calibrate_args(shape: dict) -> list[str]:
    """`agglab calibrate` options that measure `shape` (its --backend added by the caller)."""
    args = ["--workers", str(shape["workers"])]
    if shape["topology"] != "single":
        args += ["--topology", shape["topology"]]
    if shape.get("k") is not None:
        args += ["--k", str(shape["k"])]
    if shape.get("tree"):
        args += ["--tree", str(shape["tree"])]
    if shape.get("scheme") == "sparse":
        args += ["--scheme", "sparse", "--density", f"{shape['density']:g}"]
    return args


def calibrate_seconds(shape: dict, switches: int) -> float:
    """About how long calibrating `shape` takes: 6 probes (the 2 Mb/s start, a step or two
    down or up, two bisections), each 3 s of wire plus its set-up, 0.4 s a switch and 0.8 s a
    worker over 4. Fitted to BMv2 on the 2-core machine, 2026-12-06: 22 s for 8 workers on one
    switch (4 probes; this gives 6.6 s a probe), 69 s for 16 (5 probes; 13 s a probe)."""
    return 6 * (3.0 + 0.4 * switches + 0.8 * max(0, shape["workers"] - 4))


def shape_switches(shape: dict) -> int:
    """The switch count of `shape`'s network (0 when it cannot be built here)."""
    run = {k: v for k, v in shape.items() if k in ("topology", "k", "tree") and v is not None}
    try:
        return len(switches(topologies.for_run(RunSpec(workers=shape["workers"], **run))))
    except (ValueError, KeyError, TypeError):
        return 0
