"""Tree packing against an independent optimum: every aggregation tree, one exact LP.

Why: controller/trees/packing.py claims (docstring) that its total rate is within
(1-eps)^-2 * 2 of the best fractional packing of aggregation trees. Its own tests compare
Garg-Koenemann with an LP over the trees GK found, which cannot see a tree GK missed.
Here, on small graphs (4-6 switches, heterogeneous capacities, one multi-homed worker), the
test enumerates EVERY aggregation tree itself — an edge set that is a tree containing all
workers, whose leaves are exactly the workers, and in which a worker never relays (as
packing.py and check_tree require: hosts are never transit) — and solves
max sum x_t s.t. sum_{t uses e} x_t <= c(e), x >= 0 with scipy's linprog over all of them.
Only networkx, itertools and scipy are used for the optimum: nothing of packing.py.
"""

from __future__ import annotations

import itertools
import random

import networkx as nx
import numpy as np
import pytest
from networkx.algorithms.approximation import steiner_tree
from scipy.optimize import linprog

from agglab.controller.topologies import fat_tree, leaf_spine
from agglab.controller.topology import workers
from agglab.controller.trees import compute
from agglab.controller.trees.packing import _Net

FAST = 1000.0         # host links that never limit (unless a case says otherwise)


def make_graph(links, attach) -> nx.Graph:
    """links: (switch, switch, Mb/s); attach: {worker: [(switch, Mb/s), ...]} (ranks in order)."""
    g = nx.Graph()
    for a, b, bw in links:
        for n in (a, b):
            g.add_node(n, kind="switch")
        g.add_edge(a, b, bw=float(bw))
    for rank, (h, nics) in enumerate(attach.items()):
        g.add_node(h, kind="host", rank=rank)
        for sw, bw in nics:
            g.add_edge(h, sw, bw=float(bw))
    return g


def aggregation_trees(g: nx.Graph, workers: list[str]) -> list[frozenset]:
    """Every edge set that is a tree spanning the workers with the workers as its only leaves."""
    edges = [tuple(sorted(e)) for e in g.edges]
    ws = set(workers)
    found = []
    for size in range(len(ws) - 1, g.number_of_nodes()):
        for subset in itertools.combinations(edges, size):
            t = nx.Graph(subset)
            if not ws <= set(t) or not nx.is_tree(t):
                continue
            leaves = {n for n in t if t.degree(n) == 1}
            if leaves == ws and all(t.degree(w) == 1 for w in ws):
                found.append(frozenset(subset))
    return found


def optimum(g: nx.Graph, workers: list[str]) -> float:
    """The exact maximum total rate of a fractional packing of all aggregation trees."""
    trees = aggregation_trees(g, workers)
    assert trees, "no aggregation tree: the case is malformed"
    edges = sorted({e for t in trees for e in t})
    a = np.array([[1.0 if e in t else 0.0 for t in trees] for e in edges])
    b = np.array([g.edges[e]["bw"] for e in edges])
    res = linprog(-np.ones(len(trees)), A_ub=a, b_ub=b, bounds=[(0, None)] * len(trees), method="highs")
    assert res.status == 0, res.message
    return -res.fun


def _random_case(seed: int):
    """5 connected switches with 6-8 links of 10..100 Mb/s, 3 workers on distinct switches."""
    rng = random.Random(seed)
    sw = [f"s{i}" for i in range(1, 6)]
    while True:
        pairs = rng.sample(list(itertools.combinations(sw, 2)), rng.randint(6, 8))
        if nx.is_connected(nx.Graph(pairs)) and len({n for p in pairs for n in p}) == 5:
            break
    links = [(a, b, rng.choice([10, 20, 40, 50, 80, 100])) for a, b in pairs]
    return links, {f"h{i + 1}": [(s, FAST)] for i, s in enumerate(rng.sample(sw, 3))}


CASES = {
    # two disjoint paths between the workers' switches: 100 + 100
    "square": ([("s1", "s2", 100), ("s2", "s3", 100), ("s3", "s4", 100), ("s4", "s1", 100)],
               {"h1": [("s1", FAST)], "h2": [("s3", FAST)]}),
    # complete graph on 4 switches, every link a different rate, 3 workers
    "k4-hetero": ([("s1", "s2", 10), ("s1", "s3", 20), ("s1", "s4", 30), ("s2", "s3", 40),
                   ("s2", "s4", 50), ("s3", "s4", 60)],
                  {"h1": [("s1", FAST)], "h2": [("s2", FAST)], "h3": [("s3", FAST)]}),
    # a worker's own link is the bottleneck
    "slow-nic": ([("s1", "s2", 100), ("s2", "s3", 100), ("s3", "s4", 100), ("s4", "s1", 100), ("s1", "s3", 50)],
                 {"h1": [("s1", 30)], "h2": [("s2", FAST)], "h3": [("s4", FAST)]}),
    # a dual-homed worker (two NICs on two switches) on a 5-switch ring with a chord
    "dual-homed": ([("s1", "s2", 40), ("s2", "s3", 60), ("s3", "s4", 40), ("s4", "s5", 60), ("s5", "s1", 40),
                    ("s2", "s5", 20)],
                   {"h1": [("s1", 50), ("s3", 50)], "h2": [("s2", FAST)], "h3": [("s4", FAST)]}),
    # 2 x 3 grid of 6 switches, workers at three corners
    "grid-2x3": ([("s1", "s2", 100), ("s2", "s3", 40), ("s4", "s5", 40), ("s5", "s6", 100),
                  ("s1", "s4", 60), ("s2", "s5", 80), ("s3", "s6", 60)],
                 {"h1": [("s1", FAST)], "h2": [("s3", FAST)], "h3": [("s6", FAST)]}),
    **{f"random{seed}": _random_case(seed) for seed in range(4)},
}


def test_the_enumeration_by_hand():
    """The square: exactly the two 3-hop paths, and the optimum is their sum."""
    g = make_graph(*CASES["square"])
    trees = aggregation_trees(g, ["h1", "h2"])
    assert sorted(sorted(t) for t in trees) == [
        [("h1", "s1"), ("h2", "s3"), ("s1", "s2"), ("s2", "s3")],
        [("h1", "s1"), ("h2", "s3"), ("s1", "s4"), ("s3", "s4")]]
    assert optimum(g, ["h1", "h2"]) == pytest.approx(200.0)
    # the slow NIC caps everything at 30
    assert optimum(make_graph(*CASES["slow-nic"]), ["h1", "h2", "h3"]) == pytest.approx(30.0)


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("eps", [0.1, 0.3])
def test_packing_is_within_its_factor_of_the_optimum(case, eps):
    g = make_graph(*CASES[case])
    workers = list(CASES[case][1])
    best = optimum(g, workers)
    rate = compute("packing", g, eps=eps).meta["rate"]
    assert rate <= best * (1 + 1e-6), (rate, best)                 # nothing beats the optimum
    assert rate >= best * (1 - eps) ** 2 / 2, (rate, best)          # packing.py's stated guarantee


@pytest.mark.parametrize("case", CASES)
def test_packing_reaches_the_optimum_on_these_small_cases(case):
    """Stronger than the guarantee, and true today on every case above (GK's trees plus the
    exact re-optimisation over them find an optimal basis): a drop here is a regression of
    the oracle or of the re-optimisation even while the factor still holds."""
    g = make_graph(*CASES[case])
    assert compute("packing", g, eps=0.1).meta["rate"] == pytest.approx(optimum(g, list(CASES[case][1])), rel=1e-6)


@pytest.mark.parametrize("make", [lambda: fat_tree(4, bw=100, workers=8), lambda: fat_tree(8, workers=16),
                                  lambda: leaf_spine(4, 3, 2, host_bw=100, uplink_bw=40),
                                  lambda: make_graph(*CASES["k4-hetero"]), lambda: make_graph(*CASES["grid-2x3"])],
                         ids=["fattree4w8", "fattree8w16", "leafspine", "k4-hetero", "grid-2x3"])
def test_steiner_oracle_is_networkx_mehlhorn(make):
    """packing.py keeps its own Mehlhorn oracle for speed (its docstring has the numbers);
    under random link lengths it must return exactly networkx's Mehlhorn tree."""
    g = make()
    net = _Net(g, workers(g))
    h = nx.Graph()
    for i, (u, v) in enumerate(net.edges):
        h.add_edge(u, v, index=i)
    rng = random.Random(1)
    for _ in range(10):
        length = [rng.uniform(1, 10) for _ in net.edges]
        for _u, _v, d in h.edges(data=True):
            d["length"] = length[d["index"]]
        theirs = steiner_tree(h, net.workers, weight="length", method="mehlhorn")
        assert net.steiner(length) == frozenset(h.edges[e]["index"] for e in theirs.edges)
