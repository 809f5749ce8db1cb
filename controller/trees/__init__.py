"""Aggregation trees over the shared topology graph: one module per algorithm.

    compute(name, graph, workers=None, seed=0, epoch=0, **options) -> TreeSet

name: spt (one shortest-path tree), rat (rack-aware trees, LP weights), packing
(Garg–Könemann Steiner-tree packing, rates), bml (BCube stage schedule; its trees are the
level switches' groups). workers defaults to the graph's ranked hosts in rank order.
Every algorithm only sees live links (edge attr up False = failed), so after a failure
the controller marks the link and calls compute again with the next epoch.

The algorithms are discovered by module name: every module of this package except the
helpers in HELPERS is one, and `--tree NAME` works for a new `controller/trees/NAME.py`
(a `compute(graph, workers, seed=0, **options) -> TreeSet`) with no other file edited. The
names are registered with ground/runspec.py, which validates `--tree` but cannot import the
controller.
"""

from __future__ import annotations

import importlib
import pkgutil

import networkx as nx

from agglab.controller.topology import workers as ranked_workers
from agglab.controller.trees.base import Tree, TreeError, TreeSet, check_tree, live_graph
from agglab.ground.runspec import BCUBE_TREE, register_trees

HELPERS = frozenset({"base", "bench", "bml_relay"})   # modules of this package that are not an algorithm


def discover() -> tuple[str, ...]:
    """The tree algorithms: this package's modules but the helpers (and private ones), spt first."""
    names = [m.name for m in pkgutil.iter_modules(__path__)
             if not m.ispkg and m.name not in HELPERS and not m.name.startswith("_")]
    return tuple(sorted(names, key=lambda n: (n != "spt", n == BCUBE_TREE, n)))


TREE_ALGORITHMS = discover()
SWITCH_TREES = tuple(n for n in TREE_ALGORITHMS if n != BCUBE_TREE)   # trees over switches (not BCube's schedule)
register_trees(TREE_ALGORITHMS)


def compute(name: str, graph: nx.Graph, workers=None, seed: int = 0, epoch: int = 0, **options) -> TreeSet:
    if name not in TREE_ALGORITHMS:
        raise ValueError(f"unknown tree algorithm {name!r}; choose one of {', '.join(TREE_ALGORITHMS)}")
    workers = list(workers) if workers is not None else ranked_workers(graph)
    if not workers:
        raise TreeError("no workers: give the hosts ranks or pass workers")
    for w in workers:
        if w not in graph or graph.nodes[w]["kind"] != "host":
            raise TreeError(f"worker {w!r} is not a host of this topology")
    module = importlib.import_module(f"agglab.controller.trees.{name}")
    return module.compute(graph, workers, seed=seed, **options).with_epoch(epoch)


__all__ = ["TREE_ALGORITHMS", "SWITCH_TREES", "discover", "Tree", "TreeError", "TreeSet", "check_tree", "compute", "live_graph"]
