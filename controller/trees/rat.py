"""RAT — rack-aware allreduce trees with LP weights (after the APNet'20 idea).

Why rack-aware: across an oversubscribed uplink every extra flow costs the scarce
resource. So each rack is aggregated at its ToR first, and the rack then crosses its
uplinks with exactly one flow per tree. Candidate trees differ in their root (spines,
cores, aggs — or a ToR when all workers share one rack): each is a BFS tree over the live
switch fabric from that root with every worker hung under its own ToR.

Candidates are filtered: a tree in which a ToR carries more than one uplink edge (it
relays another rack, e.g. around a failed link) breaks the one-edge-per-rack rule and is
dropped when any rule-abiding tree exists; a tree whose edge set contains another's is
dominated (more load everywhere) and dropped; equal edge sets keep the shallowest root.

Weights: with in-network aggregation every tree edge carries the tree's share once in each
direction, so load(t, e) = 1 for e in t and the completion time per unit of tensor is
    min y  s.t.  sum_{t∋e} w_t <= y * c(e)  for every link,  sum_t w_t = 1,  w >= 0.
Many weightings reach the optimal y (symmetric cores); a second LP keeps y optimal and
minimises the largest single weight, so a later failure of one tree strands the least
data. A degraded link lowers c(e) and so the weight of the trees over it; a failed link
is invisible (agglab.controller.trees.base.live_graph). At most `max_trees` trees are kept,
because the data plane splits a job's slots among them.
"""

from __future__ import annotations

import networkx as nx
import numpy as np
from scipy.optimize import linprog
from scipy.sparse import csr_matrix

from agglab.controller.topology import natural_key
from agglab.controller.trees.base import (Tree, TreeError, TreeSet, adjacency, bfs_parents, capacities,
                                   check_tree, prune)


def racks_of(g: nx.Graph, workers, adj: dict) -> dict:
    """worker -> the ToR that aggregates its rack: its `rack` attr if that link is live,
    otherwise its first live switch neighbour."""
    out = {}
    for w in workers:
        nbrs = adj.get(w, [])
        if not nbrs:
            raise TreeError(f"worker {w} has no live link")
        rack = g.nodes[w].get("rack")
        out[w] = rack if rack in nbrs else nbrs[0]
    return out


def candidates(g: nx.Graph, workers, adj: dict) -> list[Tree]:
    """Rack-aware BFS trees, one per distinct useful root (see module docstring)."""
    rack = racks_of(g, workers, adj)
    tors = set(rack.values())
    is_switch = {n: g.nodes[n]["kind"] == "switch" for n in adj}
    sw_adj = {n: [m for m in nbrs if is_switch[m]] for n, nbrs in adj.items() if is_switch[n]}
    good, other = {}, {}
    for root in sorted(sw_adj, key=natural_key):
        # EXERCISE rack-aware BEGIN hint: BFS the switch fabric from root (bfs_parents(sw_adj, root, lambda n: False)) and skip a root that misses a ToR; hang every worker under its ToR (rack); tree = Tree.from_parent(0, root, prune(parent, workers)); then count, per ToR, the tree edges to another switch (either end of an edge may be the ToR): pool = good when every ToR has at most one, else other
        parent = bfs_parents(sw_adj, root, lambda n: False)
        if not tors <= parent.keys():
            continue
        parent.update(rack)
        tree = Tree.from_parent(0, root, prune(parent, workers))
        uplinks = {t: 0 for t in tors}
        for a, b in tree.edges:
            for t, o in ((a, b), (b, a)):
                if t in uplinks and is_switch[o]:
                    uplinks[t] += 1
        pool = good if max(uplinks.values()) <= 1 else other
        # EXERCISE END
        best = pool.get(tree.edges)
        if best is None or (tree.height, natural_key(tree.root)) < (best.height, natural_key(best.root)):
            pool[tree.edges] = tree
    pool = good or other
    if not pool:
        raise TreeError("no switch reaches every rack over live links (workers partitioned)")
    kept: list[Tree] = []
    for tree in sorted(pool.values(), key=lambda t: (len(t.edges), natural_key(t.root))):
        if not any(k.edges < tree.edges for k in kept):
            kept.append(tree)
    return sorted(kept, key=lambda t: natural_key(t.root))


def lp_weights(edge_sets: list, cap: dict) -> tuple[np.ndarray, float]:
    """(weights, y): minimal completion time per Mb, then the most even optimal weighting."""
    links = sorted({e for s in edge_sets for e in s})
    row = {e: i for i, e in enumerate(links)}
    scale = max(cap[e] for e in links)
    c = np.array([cap[e] / scale for e in links])
    n, m = len(edge_sets), len(links)
    rows, cols = [], []
    for t, s in enumerate(edge_sets):
        for e in s:
            rows.append(row[e])
            cols.append(t)
    load = csr_matrix((np.ones(len(rows)), (rows, cols)), shape=(m, n)).toarray()
    a_ub = np.hstack([load, -c[:, None]])
    a_eq = np.hstack([np.ones((1, n)), np.zeros((1, 1))])
    first = linprog(np.r_[np.zeros(n), 1.0], A_ub=a_ub, b_ub=np.zeros(m), A_eq=a_eq, b_eq=[1.0],
                    bounds=[(0, None)] * (n + 1), method="highs")
    if first.status != 0:
        raise TreeError(f"RAT LP failed: {first.message}")
    y = first.x[-1]
    # second stage: keep y (with a hair of slack) and minimise the largest weight z
    a2 = np.vstack([np.hstack([load, np.zeros((m, 1))]), np.hstack([np.eye(n), -np.ones((n, 1))])])
    b2 = np.r_[c * y * (1 + 1e-7) + 1e-12, np.zeros(n)]
    second = linprog(np.r_[np.zeros(n), 1.0], A_ub=a2, b_ub=b2, A_eq=a_eq, b_eq=[1.0],
                     bounds=[(0, None)] * (n + 1), method="highs")
    w = second.x[:n] if second.status == 0 else first.x[:n]
    w = np.where(w < 1e-9, 0.0, w)
    return w / w.sum(), y / scale


def compute(g: nx.Graph, workers, seed: int = 0, max_trees: int = 8) -> TreeSet:
    """RAT trees and weights. `seed` is unused: candidates and LP are deterministic."""
    adj = adjacency(g, workers)
    cand = candidates(g, workers, adj)
    considered = len(cand)
    cap = capacities(g)
    weights, y = lp_weights([t.edges for t in cand], cap)
    chosen = [i for i in np.argsort(-weights, kind="stable") if weights[i] > 0]
    if len(chosen) > max_trees:
        cand = [cand[i] for i in sorted(chosen[:max_trees])]
        weights, y = lp_weights([t.edges for t in cand], cap)
        chosen = [i for i in range(len(cand)) if weights[i] > 0]
    # Mb/s of tensor the job aggregates, from the final weights (not the LP's y, which the
    # second stage may exceed by its slack), so every link's sum of tree rates fits exactly
    load: dict = {}
    for i in chosen:
        for e in cand[i].edges:
            load[e] = load.get(e, 0.0) + weights[i]
    rate = min(cap[e] / w for e, w in load.items())
    trees = tuple(Tree(id=k, root=cand[i].root, parent=cand[i].parent, edges=cand[i].edges,
                       weight=float(weights[i]), rate=float(weights[i] * rate))
                  for k, i in enumerate(sorted(chosen)))
    for t in trees:
        check_tree(g, t, workers)
    return TreeSet(trees=trees, tree="rat",
                   meta={"rate": float(rate), "candidates": considered, "lp_time_per_mb": float(y)})
