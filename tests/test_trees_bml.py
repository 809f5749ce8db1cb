"""BML on BCube: the schedule computes the exact sum, every transfer is one switch hop, and
in every stage the parts occupy different NICs."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from agglab.controller.topologies import bcube
from agglab.controller.topology import hosts
from agglab.controller.trees import TreeError, check_tree, compute
from agglab.controller.trees.bml import schedule, simulate_bml, simulate_in_network

SHAPES = st.sampled_from([(2, 0), (2, 1), (3, 1), (4, 1), (2, 2), (3, 2), (2, 3)])


@given(shape=SHAPES, length=st.integers(0, 200), seed=st.integers(0, 2 ** 32 - 1))
@settings(max_examples=40, deadline=None)
def test_host_based_and_in_network_compute_the_exact_sum(shape, length, seed):
    sched = compute("bml", bcube(*shape)).schedule
    rng = np.random.default_rng(seed)
    arrays = {h: rng.integers(-2 ** 40, 2 ** 40, size=length) for h in sched.hosts}
    total = sum(arrays.values())
    for result in (simulate_bml(arrays, sched), simulate_in_network(arrays, sched)):
        assert set(result) == set(sched.hosts)
        for h, r in result.items():
            np.testing.assert_array_equal(r, total, err_msg=h)


def test_a_dropped_transfer_breaks_the_sum():
    """The simulator really depends on every transfer (so the test above can fail)."""
    sched = schedule(bcube(3, 1))
    arrays = {h: np.arange(1, 19) * (i + 1) for i, h in enumerate(sched.hosts)}
    for stage in range(len(sched.stages)):
        broken = sched.__class__(sched.n, sched.k, sched.hosts,
                                 sched.stages[:stage] + (sched.stages[stage][1:],) + sched.stages[stage + 1:],
                                 sched.in_network)
        result = simulate_bml(arrays, broken)
        assert any((r != sum(arrays.values())).any() for r in result.values())


@pytest.mark.parametrize("shape", [(2, 0), (3, 1), (4, 1), (2, 2), (3, 2)])
def test_every_transfer_is_one_hop_and_parts_use_distinct_nics(shape):
    g = bcube(*shape)
    sched = schedule(g)
    levels = shape[1] + 1
    assert len(sched.stages) == 2 * levels and len(sched.in_network) == levels
    for s, stage in enumerate(sched.stages):
        op = "reduce" if s < levels else "gather"
        part_level = {}
        nic_part = {}
        for t in stage:
            assert t.src != t.dst and t.op == op
            assert g.has_edge(t.src, t.via) and g.has_edge(t.via, t.dst)
            assert g.nodes[t.via]["level"] == t.level
            assert part_level.setdefault(t.part, t.level) == t.level
            assert nic_part.setdefault((t.src, t.level), t.part) == t.part   # one part per NIC
        assert sorted(part_level.values()) == list(range(levels))           # all NICs busy
    for stage in sched.in_network:
        for step in stage:
            assert all(g.has_edge(h, step.switch) for h in step.members) and len(step.members) == shape[0]


def test_reduce_scatter_sends_each_server_one_nth_less_each_stage():
    n, k = 3, 2
    sched = schedule(bcube(n, k))
    count, levels = n ** (k + 1), k + 1
    for s in range(levels):       # per part and server: (n-1)/n of the pieces still held
        held = count // n ** s
        assert len(sched.stages[s]) == levels * count * held * (n - 1) // n


def test_stars_per_level_switch():
    g = bcube(3, 1)
    ts = compute("bml", g, epoch=4)
    assert ts.epoch == 4 and sum(ts.weights) == pytest.approx(1.0)
    assert len(ts.trees) == 6
    for t in ts.trees:
        members = [n for n in t.parent if n != t.root]
        check_tree(g, t, members)
        assert t.id == g.nodes[t.root]["level"]
    for h in hosts(g):            # every server is in exactly one star per level
        assert sorted(t.id for t in ts.trees if h in t.parent) == [0, 1]
    assert ts.to_dict() == compute("bml", bcube(3, 1), epoch=4).to_dict()


def test_bml_needs_every_server_and_every_nic():
    g = bcube(3, 1)
    with pytest.raises(TreeError, match="every BCube server"):
        compute("bml", g, workers=hosts(g)[:8])
    g.edges["h1", "b1s1"]["up"] = False
    with pytest.raises(TreeError, match="level-1"):
        compute("bml", g)
