"""One validation entry point: a RunSpec in, a checked run (spec + topology graph) out.

Why one: the CLI, the Session, the lab and the experiments used to check a run in several
places (the spec's own fields, then the graph, the failures and the first trees in the
session, then all of it again when the session started). `check_run` does everything that
needs no root and builds nothing, once: bad input (ValueError, TopologyError, TreeError)
surfaces before Mininet with one line, and a `CheckedRun` is what the Session takes.
`check_override` re-checks what a lab command may change on a running network.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

import networkx as nx

from agglab.controller import topologies, tree_install, trees
from agglab.controller.bml_job import BmlJob
from agglab.controller.job_protocol import partitions
from agglab.controller.topology import switches, workers as worker_hosts
from agglab.ground import wire
from agglab.ground.cluster_file import load
from agglab.ground.runspec import BCUBE_TREE, RunSpec


@dataclass(frozen=True)
class CheckedRun:
    """A validated RunSpec and its topology graph (every named failure exists, the first
    trees fit the data plane)."""
    spec: RunSpec
    graph: nx.Graph


def check_run(spec: RunSpec | CheckedRun) -> CheckedRun:
    """The spec's topology graph, checked: every named --fail link exists, the first trees
    fit the data plane (fan-in, trees, ports) and `--fail tree@F` has a link to reroute
    around. A CheckedRun passes through unchanged (checked once)."""
    if isinstance(spec, CheckedRun):
        return spec
    spec.validate()
    if not spec.host_baseline and spec.workers > wire.MAX_RANKS:
        raise ValueError(f"--workers {spec.workers}: a job's ranks travel in the aggregation header's "
                         f"worker field, so at most {wire.MAX_RANKS} workers per job aggregate in the network "
                         "(--algorithm ring or ps take more)")
    g = topologies.for_run(spec)
    _check_failure_names(spec, g)
    busiest = max(switches(g), key=g.degree)
    if g.degree(busiest) > tree_install.MAX_PORT:
        raise ValueError(f"switch {busiest} has {g.degree(busiest)} links, but P4 ports are bit<9> "
                         f"(at most {tree_install.MAX_PORT} usable)")
    if spec.tree == BCUBE_TREE:
        BmlJob.check(g)
    else:
        check_failures(spec, g, first_links(spec, g))
    if spec.cluster:                           # a bad cluster file fails before anything is built

        load(spec.cluster)
        if spec.chaos is not None:
            raise ValueError("--chaos: not supported with --cluster (its switch restarts are not tried across servers)")
    if spec.keep:
        keep = Path(spec.keep)
        if keep.exists() and (not keep.is_dir() or any(keep.iterdir())):
            raise ValueError(f"--keep {spec.keep}: exists and is not an empty directory (a kept run is never "
                             "written over)")
        parent = next(p for p in keep.absolute().parents if p.exists())   # where it will be made
        if not keep.exists() and not (parent.is_dir() and _can_make_in(parent)):
            raise ValueError(f"--keep {spec.keep}: cannot be made ({parent} is not a directory you may write)")
    return CheckedRun(spec, g)


def _can_make_in(parent: Path) -> bool:
    """Whether a directory can be made in `parent`, found by making one and removing it: access()
    tells root yes on /proc and /sys, where mkdir then fails, and the run's copy would fail only
    after the run, with its directory already gone."""
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".agglab-keep-", dir=parent))
    except OSError:
        return False
    return True


def check_override(spec: RunSpec, g: nx.Graph, used: set[tuple[str, str]] | None) -> RunSpec:
    """A running network's next allreduce (the lab's `allreduce --loss P --fail tree@F`):
    the spec's fields, its named failures, and `--fail tree@F` against the links the job
    uses now (`used`, None where the job has no trees)."""
    spec.validate()
    _check_failure_names(spec, g)
    if used is not None:
        check_failures(spec, g, used)
    return spec


def _check_failure_names(spec: RunSpec, g: nx.Graph) -> None:
    for f in spec.fail_specs:
        f.check(g)
    for f in spec.fail_switch_specs:
        f.check(g)


def first_links(spec: RunSpec, g: nx.Graph) -> set[tuple[str, str]]:
    """The links the job's traffic uses at first: the trees' (checked against the data
    plane's limits), or, where the hosts or IP routes carry it, every switch-switch link."""
    if not spec.on_trees:
        return {(u, v) for u, v in g.edges if g.nodes[u]["kind"] == g.nodes[v]["kind"] == "switch"}
    treeset = trees.compute(spec.tree, g, worker_hosts(g))
    tree_install.check_fits(g, treeset)
    return {e for t in treeset.trees for e in t.edges}


def check_failures(spec: RunSpec, g: nx.Graph, used: set[tuple[str, str]]) -> None:
    """Refuse `--fail tree@F` when no switch-switch link the job uses can fail without
    cutting a worker off: the run could only end partitioned, never reroute."""
    for f in spec.fail_specs:
        if f.link is not None:
            continue
        inner = [e for e in used if g.nodes[e[0]]["kind"] == g.nodes[e[1]]["kind"] == "switch"]
        if not any(not partitions(g, e, worker_hosts(g)) for e in inner):
            why = ("it has no link between switches" if not inner else
                   "every link between its switches is the only path to some worker")
            raise ValueError(f"--fail tree@{f.at:g}: nothing to reroute around on this topology ({why}); "
                             "name a link (A-B@F) to fail one anyway")
