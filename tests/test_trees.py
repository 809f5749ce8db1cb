"""Tree algorithms on every applicable topology: span, live links only, capacities, LP weights,
determinism. BML's schedule has its own file (tests/test_trees_bml.py)."""

from __future__ import annotations

from pathlib import Path

import networkx as nx
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from agglab.controller.topologies import bcube, fat_tree, from_yaml, leaf_spine
from agglab.controller.topology import single_switch, switches, workers
from agglab.controller.trees import TreeError, check_tree, compute
from agglab.controller.trees.base import capacities, edge_key
from agglab.controller.trees.packing import _Net, garg_koenemann
from agglab.controller.trees.spt import spt_tree

EXAMPLE = Path(__file__).resolve().parent.parent / "experiments" / "topologies" / "example.yaml"
TOPOLOGIES = {
    "single": lambda: single_switch(5, bw=100),
    "leafspine": lambda: leaf_spine(4, 3, 2, host_bw=100, uplink_bw=40),     # oversubscription 3.75
    "fattree4": lambda: fat_tree(4, bw=100),
    "fattree4w8": lambda: fat_tree(4, bw=100, workers=8),
    "fattree6w12": lambda: fat_tree(6, workers=12),
    "yaml": lambda: from_yaml(EXAMPLE),
}
ALGOS = ("spt", "rat", "packing")


def assert_valid(g, ts, ws=None):
    ws = workers(g) if ws is None else ws
    assert ts.trees, "no trees"
    assert sum(ts.weights) == pytest.approx(1.0, abs=1e-9)
    assert all(w > 0 for w in ts.weights)
    assert len({t.id for t in ts.trees}) == len(ts.trees)
    for t in ts.trees:
        check_tree(g, t, ws)


def link_loads(ts):
    load = {}
    for t in ts.trees:
        for e in t.edges:
            load[e] = load.get(e, 0.0) + t.rate
    return load


@pytest.mark.parametrize("topo", TOPOLOGIES)
@pytest.mark.parametrize("algo", ALGOS)
def test_spans_workers_deterministically(algo, topo):
    g = TOPOLOGIES[topo]()
    ts = compute(algo, g, seed=3, epoch=2)
    assert_valid(g, ts)
    assert ts.epoch == 2 and ts.tree == algo
    assert ts.to_dict() == compute(algo, TOPOLOGIES[topo](), seed=3, epoch=2).to_dict()


@pytest.mark.parametrize("topo", TOPOLOGIES)
@pytest.mark.parametrize("algo", ("rat", "packing"))
def test_rates_respect_capacities(algo, topo):
    g = TOPOLOGIES[topo]()
    cap = capacities(g)
    for e, load in link_loads(compute(algo, g)).items():
        assert load <= cap[e] * (1 + 1e-9), e


def _connected_without(g, failed):
    ws = set(workers(g))
    keep = [n for n in g if g.nodes[n]["kind"] == "switch" or n in ws]
    h = g.subgraph(keep).copy()
    h.remove_edges_from(failed)
    comp = nx.node_connected_component(h, next(iter(ws)))
    return ws <= comp


@pytest.mark.parametrize("topo", ["leafspine", "fattree4w8", "fattree6w12", "yaml"])
@given(data=st.data())
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_failed_links_are_avoided(topo, data):
    g = TOPOLOGIES[topo]()
    links = sorted((edge_key(a, b) for a, b in g.edges), key=str)
    failed = data.draw(st.lists(st.sampled_from(links), max_size=4, unique=True))
    for a, b in failed:
        g.edges[a, b]["up"] = False
    for algo in ALGOS:
        if _connected_without(g, failed):
            ts = compute(algo, g, seed=data.draw(st.integers(0, 5)))
            assert_valid(g, ts)
            assert not any(ts.uses(a, b) for a, b in failed)
        else:
            with pytest.raises(TreeError, match="partitioned|worker h[0-9]+ has no live link"):
                compute(algo, g)


def test_removed_link_and_down_node_are_avoided():
    g = fat_tree(4, workers=8)
    g.remove_edge("e1", "a1")
    g.nodes["c1"]["up"] = False
    for algo in ALGOS:
        ts = compute(algo, g)
        assert_valid(g, ts)
        assert all("c1" not in t.parent and not t.uses("e1", "a1") for t in ts.trees)


def test_partition_is_a_clear_error():
    g = leaf_spine(2, 2, 1)
    g.edges["l2", "s1"]["up"] = False
    for algo in ALGOS:
        with pytest.raises(TreeError, match="partition|cannot reach|reaches every"):
            compute(algo, g)


def test_spt_paths_are_shortest_and_root_is_central():
    g = fat_tree(4, workers=8)
    ts = compute("spt", g)
    (t,) = ts.trees
    assert g.nodes[t.root]["tier"] == "core"          # equidistant from every pod
    for w in workers(g):
        assert t.depth(w) == nx.shortest_path_length(g, t.root, w)
    chosen = spt_tree(g, workers(g), root="e1")
    assert chosen.root == "e1" and chosen.depth("h1") == 1
    with pytest.raises(TreeError, match="not a switch"):
        spt_tree(g, workers(g), root="h1")


@pytest.mark.parametrize("topo", ["leafspine", "fattree4", "fattree4w8", "fattree6w12", "yaml"])
def test_rat_one_uplink_edge_per_rack(topo):
    g = TOPOLOGIES[topo]()
    ts = compute("rat", g)
    rack = {w: g.nodes[w].get("rack") or next(iter(g.neighbors(w))) for w in workers(g)}
    for t in ts.trees:
        for w in workers(g):
            assert t.parent[w] == rack[w]
        for tor in set(rack.values()):
            up = [e for e in t.edges if tor in e and all(g.nodes[n]["kind"] == "switch" for n in e)]
            assert len(up) == 1 or (t.root == tor and len(up) <= 1)


def _weight_on(ts, a, b):
    return sum(t.weight for t in ts.trees if t.uses(a, b))


@given(rack=st.integers(1, 4), spine=st.integers(1, 2), factor=st.floats(0.05, 0.9))
@settings(max_examples=25, deadline=None)
def test_rat_moves_weight_off_a_degraded_uplink(rack, spine, factor):
    g = leaf_spine(4, 3, 2, host_bw=100, uplink_bw=40)
    before = compute("rat", g)
    assert _weight_on(before, f"l{rack}", f"s{spine}") == pytest.approx(0.5)
    g.edges[f"l{rack}", f"s{spine}"]["bw"] = 40 * factor
    after = compute("rat", g)
    assert sum(after.weights) == pytest.approx(1.0)
    assert _weight_on(after, f"l{rack}", f"s{spine}") == pytest.approx(factor / (1 + factor), abs=1e-6)
    assert after.meta["rate"] < before.meta["rate"]


def test_rat_degraded_fat_tree_link_and_even_split():
    g = fat_tree(4, bw=100)
    assert compute("rat", g).weights == pytest.approx([0.25] * 4)   # tie broken towards even
    g.edges["e1", "a1"]["bw"] = 10      # host links still bound y at 1/100, so c1+c2 <= 10/100
    ts = compute("rat", g)
    assert _weight_on(ts, "e1", "a1") == pytest.approx(0.1)
    assert ts.meta["rate"] == pytest.approx(100.0)
    g.edges["e1", "a1"]["up"] = False
    ts = compute("rat", g)
    assert _weight_on(ts, "e1", "a1") == 0 and sum(ts.weights) == pytest.approx(1)


def test_rat_caps_tree_count():
    g = fat_tree(8, workers=16)
    ts = compute("rat", g, max_trees=3)
    assert len(ts.trees) <= 3 and ts.meta["candidates"] >= 16
    assert_valid(g, ts)


def test_packing_reaches_the_uplink_cut_bound():
    """Every tree crosses each rack's uplinks, so 2 spines x 40 Mb/s bound the total: 80."""
    g = leaf_spine(4, 3, 2, host_bw=100, uplink_bw=40)
    ts = compute("packing", g)
    assert ts.meta["rate"] == pytest.approx(80.0, rel=1e-6)
    assert [t.rate for t in ts.trees] == pytest.approx([40.0, 40.0], rel=1e-6)


def test_packing_beats_rat_where_relaying_helps():
    """On the example file a slow t2-sp2 uplink caps RAT; packing routes around it."""
    g = from_yaml(EXAMPLE)
    assert compute("packing", g).meta["rate"] > compute("rat", g).meta["rate"]


@pytest.mark.parametrize("topo", ["leafspine", "fattree4w8", "yaml"])
@pytest.mark.parametrize("eps", [0.1, 0.3])
def test_garg_koenemann_is_feasible_and_near_optimal(topo, eps):
    g = TOPOLOGIES[topo]()
    net = _Net(g, workers(g))
    gk = garg_koenemann(net, eps)
    load = [0.0] * len(net.edges)
    for tree, rate in gk.items():
        for e in tree:
            load[e] += rate
    assert all(l <= c * (1 + 1e-9) for l, c in zip(load, net.cap))
    best = compute("packing", g, eps=eps).meta["rate"]
    assert sum(gk.values()) >= best * (1 - eps) ** 2 / 2


def test_set_uses_only_tree_links():
    g = fat_tree(4, workers=8)
    ts = compute("spt", g)
    (t,) = ts.trees
    a, b = next(iter(t.edges))
    assert ts.uses(a, b) and ts.uses(b, a)
    unused = next(e for e in g.edges if not t.uses(*e))
    assert not ts.uses(*unused)


def test_dispatcher_errors():
    with pytest.raises(ValueError, match="unknown tree algorithm"):
        compute("ring", single_switch(2))
    with pytest.raises(TreeError, match="not a host"):
        compute("spt", single_switch(2), workers=["s1"])
    with pytest.raises(TreeError, match="relay|BCube|partition"):
        compute("spt", bcube(3, 1))
    with pytest.raises(TreeError, match="BCube"):
        compute("bml", fat_tree(4))


def test_single_worker():
    g = fat_tree(4, workers=1)
    for algo in ALGOS:
        ts = compute(algo, g)
        assert_valid(g, ts)
        assert all(t.root == "e1" for t in ts.trees) and switches(g)
