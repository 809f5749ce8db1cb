"""Aggregation trees over the shared topology graph: one module per algorithm.

    compute(name, graph, workers=None, seed=0, epoch=0, **options) -> TreeSet

name: spt (one shortest-path tree), rat (rack-aware trees, LP weights), packing
(Garg–Könemann Steiner-tree packing, rates), bml (BCube stage schedule; its trees are the
level switches' groups). workers defaults to the graph's ranked hosts in rank order.
Every algorithm only sees live links (edge attr up False = failed), so after a failure
the controller marks the link and calls compute again with the next epoch.
"""

from __future__ import annotations

import importlib

import networkx as nx

from controller.topology import workers as ranked_workers
from controller.trees.base import Tree, TreeError, TreeSet, check_tree, live_graph

ALGORITHMS = ("spt", "rat", "packing", "bml")


def compute(name: str, graph: nx.Graph, workers=None, seed: int = 0, epoch: int = 0, **options) -> TreeSet:
    if name not in ALGORITHMS:
        raise ValueError(f"unknown tree algorithm {name!r}; choose one of {', '.join(ALGORITHMS)}")
    workers = list(workers) if workers is not None else ranked_workers(graph)
    if not workers:
        raise TreeError("no workers: give the hosts ranks or pass workers")
    for w in workers:
        if w not in graph or graph.nodes[w]["kind"] != "host":
            raise TreeError(f"worker {w!r} is not a host of this topology")
    module = importlib.import_module(f"controller.trees.{name}")
    return module.compute(graph, workers, seed=seed, **options).with_epoch(epoch)


__all__ = ["ALGORITHMS", "Tree", "TreeError", "TreeSet", "check_tree", "compute", "live_graph"]
