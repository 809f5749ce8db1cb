"""Data-centre topologies as the one shared graph (see controller/topology.py).

Why generators instead of hand-written graphs: the tree algorithms, the Mininet builder
and the tests must agree on the wiring, and a k=16 fat-tree has 1344 nodes. Every
generator follows topology.py's conventions (node attr kind host|switch, workers carry
rank, edges carry bw in Mb/s) and ends with assign_ports, so port numbers are derived once.

Extra attributes: hosts carry `rack` (the name of their top-of-rack switch, which is where
RAT aggregates a rack) and, on BCube, `address` (base-n digits, index l = digit of level l);
switches carry `tier` (leaf/spine, edge/agg/core, or `level<l>`). The graph records its
family and parameters in g.graph so an algorithm such as BML can check what it runs on.

Names stay short because Mininet interface names (`<node>-eth<N>`) must fit in 15 bytes.

The built-in topologies are one table, TOPOLOGIES: a row per `--topology` name with its
aliases, generator, run options and help words (below, with why).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import networkx as nx

from agglab.ground.runspec import register_topologies
from agglab.ground.wire import MAX_WORKERS
from agglab.controller.topology import (IFNAME_MAX, TopologyError, assign_ports, hosts, natural_key, single_switch,
                                 switches)
from agglab.controller.topology import workers as ranked_workers
from agglab.controller import topology_file


def check_names(g: nx.Graph) -> nx.Graph:
    """Refuse graphs whose interface names Mininet would truncate (silently colliding)."""
    for _, _, e in g.edges(data=True):
        for name in e.get("intfs", {}).values():
            if len(name) > IFNAME_MAX:
                raise TopologyError(f"interface name {name!r} is longer than {IFNAME_MAX} characters; "
                                    "use shorter node names")
    return g


def rank_workers(g: nx.Graph, count: int | None, racks: list[list[str]]) -> nx.Graph:
    """Give ranks to `count` hosts (all when None), taking racks round-robin.

    Why round-robin: a job of 8 workers on a 16-host fat-tree should cross racks and pods,
    otherwise the interesting (oversubscribed, failure-prone) links carry nothing. `racks`
    is already interleaved by the caller (pod-major for fat-trees). Ranks follow natural
    host-name order among the chosen hosts, so rank i is predictable from the names.
    """
    total = sum(len(r) for r in racks)
    if count is None:
        count = total
    if not 1 <= count <= total:
        raise TopologyError(f"workers must be between 1 and {total} on this topology, got {count}")
    chosen: list[str] = []
    for column in itertools.zip_longest(*racks):
        chosen.extend(h for h in column if h is not None)
    for rank, h in enumerate(sorted(chosen[:count], key=natural_key)):
        g.nodes[h]["rank"] = rank
    return g


def leaf_spine(racks: int = 4, hosts_per_rack: int = 2, spines: int = 2, host_bw: float | None = None,
               uplink_bw: float | None = None, workers: int | None = None) -> nx.Graph:
    """Two-tier Clos: leaves l1..lR (one per rack) each wired to every spine s1..sS.

    oversubscription = hosts_per_rack*host_bw / (spines*uplink_bw), stored in g.graph (None
    when a bandwidth is unset): it is the knob RAT is about, since >1 means the uplinks
    cannot carry every host's traffic at line rate.
    """
    if racks < 1 or hosts_per_rack < 1 or spines < 1:
        raise TopologyError("racks, hosts_per_rack and spines must be at least 1")
    g = nx.Graph(name=f"leafspine-{racks}x{hosts_per_rack}-{spines}", topology="leafspine",
                 racks=racks, hosts_per_rack=hosts_per_rack, spines=spines)
    over = None
    if host_bw and uplink_bw:
        over = hosts_per_rack * host_bw / (spines * uplink_bw)
    g.graph["oversubscription"] = over
    for s in range(1, spines + 1):
        g.add_node(f"s{s}", kind="switch", tier="spine")
    rack_hosts = []
    for r in range(1, racks + 1):
        leaf = f"l{r}"
        g.add_node(leaf, kind="switch", tier="leaf")
        for s in range(1, spines + 1):
            g.add_edge(leaf, f"s{s}", bw=uplink_bw)
        members = []
        for i in range(hosts_per_rack):
            h = f"h{(r - 1) * hosts_per_rack + i + 1}"
            g.add_node(h, kind="host", rack=leaf)
            g.add_edge(h, leaf, bw=host_bw)
            members.append(h)
        rack_hosts.append(members)
    rank_workers(g, workers, rack_hosts)
    return check_names(assign_ports(g))


# The largest shapes built: above them a graph no run can use (at most 1024 workers) would
# take minutes and gigabytes to build before any other check ran.
MAX_FAT_TREE_K = 64
MAX_BCUBE_SERVERS = 4096


def fat_tree(k: int = 4, bw: float | None = None, workers: int | None = None,
             core_bw: float | None = None) -> nx.Graph:
    """k-ary fat-tree (Al-Fares et al.): k pods of k/2 edge + k/2 agg switches, (k/2)^2 cores.

    `core_bw` (default `bw`) is the rate of the agg-core links: below `bw` the core is
    oversubscribed by bw/core_bw (a full pod can send only that fraction of its hosts'
    capacity out of the pod), the knob RAT's claims are about on a leaf-spine.

    Edge switch i of pod p is e{p*k/2+i+1} with hosts below it; agg j of pod p is
    a{p*k/2+j+1} and connects to cores c{j*k/2+1} .. c{(j+1)*k/2}, so core c reaches every
    pod through the agg with the same index j — the property that makes a core-rooted tree
    cross each pod's uplinks exactly once. `workers` ranks that many hosts, one per edge
    switch in pod-interleaved order before a second host of any rack.
    """
    if k < 2 or k % 2:
        raise TopologyError(f"fat-tree k must be an even number >= 2, got {k}")
    if k > MAX_FAT_TREE_K:          # refused before a graph of k^3/4 hosts is built
        raise TopologyError(f"fat-tree k must be at most {MAX_FAT_TREE_K} ({MAX_FAT_TREE_K ** 3 // 4} hosts; "
                            f"a run takes at most 1024 workers), got {k}")
    half = k // 2
    g = nx.Graph(name=f"fattree-{k}", topology="fattree", k=k)
    core_bw = bw if core_bw is None else core_bw
    g.graph["oversubscription"] = bw / core_bw if bw and core_bw else None
    for c in range(half * half):
        g.add_node(f"c{c + 1}", kind="switch", tier="core")
    racks: dict[tuple[int, int], list[str]] = {}
    for p in range(k):
        for j in range(half):
            agg = f"a{p * half + j + 1}"
            g.add_node(agg, kind="switch", tier="agg", pod=p)
            for m in range(half):
                g.add_edge(agg, f"c{j * half + m + 1}", bw=core_bw)
        for i in range(half):
            edge = f"e{p * half + i + 1}"
            g.add_node(edge, kind="switch", tier="edge", pod=p)
            for j in range(half):
                g.add_edge(edge, f"a{p * half + j + 1}", bw=bw)
            members = []
            for m in range(half):
                h = f"h{(p * half + i) * half + m + 1}"
                g.add_node(h, kind="host", rack=edge, pod=p)
                g.add_edge(h, edge, bw=bw)
                members.append(h)
            racks[(p, i)] = members
    order = [racks[(p, i)] for i in range(half) for p in range(k)]     # pod-interleaved
    rank_workers(g, workers, order)
    return check_names(assign_ports(g))


def bcube(n: int = 3, k: int = 1, bw: float | None = None, workers: int | None = None) -> nx.Graph:
    """BCube(n,k): n^(k+1) servers h1.., each with k+1 NICs; k+1 levels of n^k switches.

    Server index i has base-n digits address[l] (l = 0..k, least significant first). The
    level-l switch b{l}s{j} joins the n servers whose addresses differ only in digit l.
    Because assign_ports numbers a host's neighbours in natural order and b0.. < b1.. < ...,
    NIC l of every server (interface h?-eth{l}) is its level-l link — BML relies on that.
    Switches are never wired to each other: servers relay, which is why only BML's
    host-based schedule (not an in-network tree) spans a BCube with k >= 1.
    """
    if n < 2 or k < 0:
        raise TopologyError(f"BCube needs n >= 2 and k >= 0, got n={n}, k={k}")
    if n ** (k + 1) > MAX_BCUBE_SERVERS:     # refused before n^(k+1) servers are built
        raise TopologyError(f"BCube({n},{k}) has {n ** (k + 1)} servers; at most {MAX_BCUBE_SERVERS} "
                            "(a run takes at most 1024 workers)")
    levels, count = k + 1, n ** (k + 1)
    g = nx.Graph(name=f"bcube-{n}-{k}", topology="bcube", n=n, k=k)
    for i in range(count):
        digits = tuple((i // n ** l) % n for l in range(levels))
        g.add_node(f"h{i + 1}", kind="host", address=digits)
    for l in range(levels):
        for i in range(count):
            digits = g.nodes[f"h{i + 1}"]["address"]
            rest = [d for m, d in enumerate(digits) if m != l]
            j = sum(d * n ** m for m, d in enumerate(rest))
            sw = f"b{l}s{j + 1}"
            g.add_node(sw, kind="switch", tier=f"level{l}", level=l)
            g.add_edge(f"h{i + 1}", sw, bw=bw, level=l)
    rank_workers(g, workers, [[h] for h in hosts(g)])
    return check_names(assign_ports(g))


def from_yaml(path: str | Path) -> nx.Graph:
    """A topology file; see controller/topology_file.py for the format and its errors."""
    return topology_file.load(path)


def _key(name: str) -> str:
    return str(name).lower().replace("-", "")


def _single(workers: int = 8, bw: float | None = None) -> nx.Graph:
    """One switch s1 with a host per worker (controller/topology.py), its names checked."""
    return check_names(single_switch(workers, bw=bw))


def _grown_leaf_spine(workers: int | None = None, racks: int = 4, hosts_per_rack: int | None = None,
                      **kw) -> nx.Graph:
    """A leaf-spine asked for more workers than its racks hold grows its racks instead of failing."""
    if hosts_per_rack is None:
        hosts_per_rack = max(2, -(-workers // racks)) if workers is not None else 2
    return leaf_spine(racks=racks, hosts_per_rack=hosts_per_rack, workers=workers, **kw)


def _single_options(spec, n: int) -> dict:
    if n > MAX_WORKERS:     # the fan-in of s1, refused before anything is built
        raise ValueError(f"switch s1 would aggregate {n} workers"
                         + (f" (--workers x --jobs = {n})" if n != spec.workers else "")
                         + f", but one switch aggregates at most {MAX_WORKERS} workers (its contribution "
                         "bitmap, AGG_MAX_WORKERS): a tree of switches (--topology leafspine or fattree) "
                         "takes more")
    return {"bw": spec.bw}


@dataclass(frozen=True)
class Builtin:
    """One built-in topology. name: what `--topology` takes; aliases: other spellings `build`
    accepts (a '-' is ignored in any); build(workers=None, **keywords): the generator;
    options(spec, n): the generator's keywords for a RunSpec whose jobs need n worker hosts
    (ValueError refuses the run); summary: the help text's words."""
    name: str
    build: Callable[..., nx.Graph]
    options: Callable[[object, int], dict]
    summary: str
    aliases: tuple[str, ...] = ()


# Why a registry: a topology's name, spellings, generator and run options used to live in
# separate lists (ground/runspec.py's names, a dispatch dict here, branches in for_run) that
# nothing tied together. `--topology`'s names and help, `build`'s dispatch and `for_run`
# derive from this table; ground/runspec.py, which validates `--topology` but cannot import
# the controller, is given the names (as controller/trees/__init__.py gives it the trees).
TOPOLOGIES: dict[str, Builtin] = {t.name: t for t in (
    Builtin("single", _single, _single_options, "one switch, a host per worker",
            aliases=("single_switch", "singleswitch")),
    Builtin("leafspine", _grown_leaf_spine, lambda spec, n: {"host_bw": spec.bw},
            "4 leaves x 2 spines, racks grown to hold the workers", aliases=("leaf_spine",)),
    Builtin("fattree", fat_tree, lambda spec, n: {"k": 4 if spec.k is None else spec.k, "bw": spec.bw},
            "k-ary fat-tree, --k (default 4)", aliases=("fat_tree",)),
    Builtin("bcube", bcube, lambda spec, n: {"k": spec.k if spec.k is not None else 1, "bw": spec.bw},
            "BCube(3,k), --k (default 1), with --tree bml"),
)}
SPELLINGS = {_key(spelling): t for t in TOPOLOGIES.values() for spelling in (t.name, *t.aliases)}
register_topologies(TOPOLOGIES)


def help_text() -> str:
    """`--topology`'s help: every built-in topology with its summary, or a file."""
    return "; ".join(f"{t.name}: {t.summary}" for t in TOPOLOGIES.values()) + "; or a YAML file"


def builtin(name: str) -> Builtin:
    """The built-in topology `name` spells (any alias, case and '-' ignored), or TopologyError."""
    try:
        return SPELLINGS[_key(name)]
    except KeyError:
        raise TopologyError(f"unknown topology {name!r}; choose one of "
                            f"{', '.join(TOPOLOGIES)} or a .yaml file") from None


def build(name: str, **kw) -> nx.Graph:
    """Dispatch by name (CLI spelling or alias) or load a .yaml/.yml file; None arguments are dropped.

    Why dropping None: CLI options that were not given arrive as None and should mean
    "the generator's default", not an override.
    """
    kw = {key: value for key, value in kw.items() if value is not None}
    if str(name).endswith((".yaml", ".yml")):
        if kw:
            raise TopologyError(f"a topology file takes no parameters, got {sorted(kw)}")
        return from_yaml(name)
    return builtin(name).build(**kw)


__all__ = ["TOPOLOGIES", "Builtin", "TopologyError", "leaf_spine", "fat_tree", "bcube", "from_yaml", "build",
           "builtin", "check_names", "for_run", "help_text", "hosts", "switches", "natural_key", "assign_ports"]


def for_run(spec) -> nx.Graph:
    """The topology graph a RunSpec asks for (its workers placed, links at its --bw)."""
    n = spec.workers * getattr(spec, "jobs", 1)     # every job's workers on hosts of their own
    if str(spec.topology).endswith((".yaml", ".yml")):      # the file places its own hosts
        try:
            g = from_yaml(spec.topology)
        except TopologyError as exc:
            raise ValueError(str(exc)) from exc
        ranked = ranked_workers(g)
        if g.graph.get("ranks_given") and len(ranked) != n:
            raise ValueError(f"{spec.topology} ranks {len(ranked)} hosts as workers: give --workers {len(ranked)}"
                             + (f" in all (--workers x --jobs = {n})" if n != spec.workers else ""))
        if len(ranked) < n:
            raise ValueError(f"{spec.topology} has {len(ranked)} hosts, fewer than --workers {spec.workers}"
                             + (f" x --jobs = {n}" if n != spec.workers else ""))
        for h in ranked[n:]:      # no ranks in the file: the first --workers (x --jobs) hosts work
            del g.nodes[h]["rank"]
        return g
    try:
        return build(spec.topology, workers=n, **builtin(spec.topology).options(spec, n))
    except TopologyError as exc:
        raise ValueError(str(exc)) from exc
