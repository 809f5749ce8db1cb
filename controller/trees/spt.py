"""Shortest-path aggregation tree from one root switch.

The baseline the other algorithms are measured against: every worker's packets take a
shortest (hop-count) path to the root, switches where paths merge aggregate, the result
retraces the same edges. BFS with natural-name tie-breaks makes it reproducible, and
pruning drops the switches no worker path uses, so they hold no aggregation state.
"""

from __future__ import annotations

import networkx as nx

from agglab.controller.topology import natural_key
from agglab.controller.trees.base import Tree, TreeError, TreeSet, adjacency, bfs_parents, check_tree, prune


def distances_from_workers(adj: dict, workers, is_host) -> dict:
    """dist[w][node] over the live switch fabric, hosts not used as transit."""
    out = {}
    for w in workers:
        parent = bfs_parents(adj, w, is_host)
        depth = {w: 0}
        for n in parent:                       # parents precede children in BFS order
            if parent[n] is not None:
                depth[n] = depth[parent[n]] + 1
        out[w] = depth
    return out


def central_switch(g: nx.Graph, workers, adj: dict | None = None) -> str:
    """The switch with the smallest (max, sum) hop distance to the workers, then by name.

    Why max first: the deepest worker bounds how long a block takes to complete; the sum
    breaks ties towards fewer hops overall.
    """
    adj = adj if adj is not None else adjacency(g, workers)
    is_host = _host_test(g)
    dist = distances_from_workers(adj, workers, is_host)
    best = None
    for s in sorted((n for n in adj if not is_host(n)), key=natural_key):
        if all(s in dist[w] for w in workers):
            score = (max(dist[w][s] for w in workers), sum(dist[w][s] for w in workers))
            if best is None or score < best[0]:
                best = (score, s)
    if best is None:
        raise TreeError("no switch reaches every worker over live links (workers partitioned, "
                        "or a topology such as BCube where servers must relay)")
    return best[1]


def spt_tree(g: nx.Graph, workers, root: str | None = None, tree_id: int = 0,
             adj: dict | None = None) -> Tree:
    adj = adj if adj is not None else adjacency(g, workers)
    if root is None:
        root = central_switch(g, workers, adj)
    if root not in g or g.nodes[root]["kind"] != "switch":
        raise TreeError(f"root {root!r} is not a switch of this topology")
    if root not in adj:
        raise TreeError(f"root {root} is down")
    parent = bfs_parents(adj, root, _host_test(g))
    lost = [w for w in workers if w not in parent]
    if lost:
        raise TreeError(f"workers {lost} cannot reach {root} over live links")
    return Tree.from_parent(tree_id, root, prune(parent, workers))


def compute(g: nx.Graph, workers, seed: int = 0, root: str | None = None) -> TreeSet:
    """One shortest-path tree, weight 1. `seed` is unused: the result is deterministic."""
    tree = spt_tree(g, workers, root)
    check_tree(g, tree, workers)
    return TreeSet(trees=(tree,), tree="spt", meta={"root": tree.root})


def _host_test(g: nx.Graph):
    return lambda n: g.nodes[n]["kind"] == "host"
