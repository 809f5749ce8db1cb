"""What every tree algorithm returns, and the graph helpers they share.

A Tree is rooted at a switch (aggregation is in-network, so the node that turns the sum
around must be a switch); its parent map covers every node on it — workers (always
leaves), and the switches that aggregate or relay. Its edges are exactly the
(node, parent) pairs, stored as name-sorted tuples so a failed link can be looked up
without caring which end was named first. `weight` is the share of the tensor the tree
carries (TreeSet weights sum to 1); `rate` is an absolute rate in Mb/s when the algorithm
knows one (packing, RAT's LP).

Only live links count: an edge with `up: False` (or bw 0), or a node with `up: False`,
is invisible to every algorithm, so marking a failed link in the graph is all the
controller has to do before recomputing.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field, replace

import networkx as nx

from agglab.controller.topology import natural_key


class TreeError(RuntimeError):
    """No valid tree: workers partitioned, wrong topology for the algorithm, bad root."""


def edge_key(u: str, v: str) -> tuple[str, str]:
    return (u, v) if natural_key(u) <= natural_key(v) else (v, u)


@dataclass(frozen=True)
class Tree:
    id: int
    root: str
    parent: dict                    # node -> parent node (root -> None)
    edges: frozenset                # {edge_key(node, parent)}
    weight: float = 1.0
    rate: float | None = None

    @classmethod
    def from_parent(cls, id: int, root: str, parent: dict, **kw) -> "Tree":
        edges = frozenset(edge_key(n, p) for n, p in parent.items() if p is not None)
        return cls(id=id, root=root, parent=dict(parent), edges=edges, **kw)

    @property
    def nodes(self) -> list[str]:
        return sorted(self.parent, key=natural_key)

    def children(self, node: str) -> list[str]:
        return sorted((n for n, p in self.parent.items() if p == node), key=natural_key)

    def uses(self, u: str, v: str) -> bool:
        return edge_key(u, v) in self.edges

    def depth(self, node: str) -> int:
        d = 0
        while self.parent[node] is not None:
            node, d = self.parent[node], d + 1
        return d

    @property
    def height(self) -> int:
        return max(self.depth(n) for n in self.parent)

    def to_dict(self) -> dict:
        return {"id": self.id, "root": self.root, "weight": self.weight, "rate": self.rate,
                "parent": {n: self.parent[n] for n in self.nodes},
                "edges": sorted(self.edges, key=lambda e: (natural_key(e[0]), natural_key(e[1])))}


@dataclass(frozen=True)
class TreeSet:
    """The trees of one job at one epoch; weights sum to 1 (a job's slots split by weight)."""
    trees: tuple
    epoch: int = 0
    tree: str = ""                  # the tree algorithm that made them (controller/trees/NAME.py)
    meta: dict = field(default_factory=dict)
    schedule: object = None         # BML: the explicit stage schedule (agglab.controller.trees.bml)

    @property
    def weights(self) -> tuple:
        return tuple(t.weight for t in self.trees)

    def uses(self, u: str, v: str) -> bool:
        """Whether a failure of link u-v affects this job (the controller's reinstall test)."""
        return any(t.uses(u, v) for t in self.trees)

    def with_epoch(self, epoch: int) -> "TreeSet":
        return replace(self, epoch=epoch)

    def to_dict(self) -> dict:
        return {"tree": self.tree, "epoch": self.epoch, "meta": self.meta,
                "trees": [t.to_dict() for t in self.trees]}


def is_live(g: nx.Graph, u: str, v: str) -> bool:
    e = g.edges[u, v]
    return e.get("up", True) is not False and e.get("bw") != 0 \
        and g.nodes[u].get("up", True) is not False and g.nodes[v].get("up", True) is not False


def live_graph(g: nx.Graph) -> nx.Graph:
    """A read-only view without failed links and nodes."""
    return nx.subgraph_view(g, filter_node=lambda n: g.nodes[n].get("up", True) is not False,
                            filter_edge=lambda u, v: is_live(g, u, v))


def capacities(g: nx.Graph) -> dict:
    """Capacity per live edge key, in Mb/s; unset bw counts as the fastest known link.

    Why not infinity: an unshaped veth is still a finite, shared resource, and treating it
    as the best link keeps the LPs bounded; with no bw anywhere every link counts as 1.
    """
    known = [e["bw"] for _, _, e in g.edges(data=True) if e.get("bw")]
    default = max(known) if known else 1.0
    return {edge_key(u, v): float(e.get("bw") or default)
            for u, v, e in g.edges(data=True) if is_live(g, u, v)}


def adjacency(g: nx.Graph, workers) -> dict:
    """Live neighbours in natural order over switches and the given workers only.

    Non-worker hosts are left out: they neither take part nor forward aggregation packets.
    """
    keep = set(workers)
    ok = {n for n, d in g.nodes(data=True)
          if (d["kind"] == "switch" or n in keep) and d.get("up", True) is not False}
    return {n: sorted((m for m in g.adj[n] if m in ok and is_live(g, n, m)), key=natural_key)
            for n in ok}


def bfs_parents(adj: dict, root: str, is_host) -> dict:
    """BFS parent map from root; hosts are reached but never expanded (no host transit).

    Deterministic tie-break: a node's parent is the first node, in BFS order, to see it,
    and neighbours are visited in natural name order.
    """
    parent = {root: None}
    queue = deque([root])
    while queue:
        u = queue.popleft()
        if u != root and is_host(u):
            continue
        for v in adj[u]:
            if v not in parent:
                parent[v] = u
                queue.append(v)
    return parent


def prune(parent: dict, workers) -> dict:
    """Keep only the nodes on a worker's path to the root."""
    keep = {}
    for w in workers:
        node = w
        while node is not None and node not in keep:
            keep[node] = parent[node]
            node = parent[node]
    return keep


def check_tree(g: nx.Graph, tree: Tree, workers) -> None:
    """Raise TreeError unless `tree` is a valid aggregation tree for `workers` on g's live links."""
    workers = set(workers)
    if tree.root not in g or g.nodes[tree.root]["kind"] != "switch":
        raise TreeError(f"tree {tree.id}: root {tree.root} is not a switch")
    if tree.parent.get(tree.root, "x") is not None:
        raise TreeError(f"tree {tree.id}: root has a parent")
    missing = workers - set(tree.parent)
    if missing:
        raise TreeError(f"tree {tree.id} misses workers {sorted(missing, key=natural_key)}")
    for n, p in tree.parent.items():
        if p is None and n != tree.root:
            raise TreeError(f"tree {tree.id}: second root {n}")
        if p is not None and (not g.has_edge(n, p) or not is_live(g, n, p)):
            raise TreeError(f"tree {tree.id}: {n}-{p} is not a live link")
        seen = {n}
        while p is not None:
            if p in seen or p not in tree.parent:
                raise TreeError(f"tree {tree.id}: {n} does not reach the root")
            seen.add(p)
            p = tree.parent[p]
    kids: dict = {}
    for n, p in tree.parent.items():
        kids.setdefault(p, []).append(n)
    for n in tree.parent:
        if g.nodes[n]["kind"] == "host" and (n not in workers or n in kids):
            raise TreeError(f"tree {tree.id}: host {n} is not a worker leaf")
        if n not in workers and n not in kids:
            raise TreeError(f"tree {tree.id}: switch {n} is a leaf without workers")
    if tree.edges != frozenset(edge_key(n, p) for n, p in tree.parent.items() if p is not None):
        raise TreeError(f"tree {tree.id}: edges do not match the parent map")


def tree_center(parent: dict, is_host) -> str:
    """The switch minimising the tree's height when re-rooted there (ties: natural order).

    Why: where the sum turns around does not change any link's load, only latency, so the
    shallowest root is the free choice.
    """
    adj: dict = {}
    for n, p in parent.items():
        if p is not None:
            adj.setdefault(n, []).append(p)
            adj.setdefault(p, []).append(n)
    best = None
    for s in sorted((n for n in parent if not is_host(n)), key=natural_key):
        height = max(bfs_depths(adj, s).values())
        if best is None or height < best[0]:
            best = (height, s)
    return best[1]


def bfs_depths(adj: dict, root: str) -> dict:
    depth = {root: 0}
    queue = deque([root])
    while queue:
        u = queue.popleft()
        for v in adj.get(u, ()):
            if v not in depth:
                depth[v] = depth[u] + 1
                queue.append(v)
    return depth


def reroot(parent: dict, root: str) -> dict:
    """The same undirected tree, with parents pointing towards a new root."""
    adj: dict = {}
    for n, p in parent.items():
        if p is not None:
            adj.setdefault(n, []).append(p)
            adj.setdefault(p, []).append(n)
    for nbrs in adj.values():
        nbrs.sort(key=natural_key)
    out = {root: None}
    queue = deque([root])
    while queue:
        u = queue.popleft()
        for v in adj.get(u, ()):
            if v not in out:
                out[v] = u
                queue.append(v)
    return out
