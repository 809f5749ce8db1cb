"""ATP's wire model (emulation/wire_model.atp_loads / atp_seconds): its two levels' streams
and the PS's unicast results, link by link, counted here by hand on small networks."""

from __future__ import annotations

import pytest

from agglab.controller import topologies
from agglab.emulation import wire_model
from agglab.ground import wire
from agglab.ground.runspec import RunSpec

FB = wire.FRAME_BYTES
BLOCKS = 100                      # 6,400 int32 elements: 100 K-blocks, one frame each


def _leaf_spine():
    # 2 racks x 2 hosts, 1 spine: ranks h1 0 (the PS, rack l1), h2 1 (l1), h3 2 and h4 3 (l2)
    g = topologies.leaf_spine(racks=2, hosts_per_rack=2, spines=1, host_bw=10, uplink_bw=10, workers=4)
    assert [g.nodes[h]["rank"] for h in ("h1", "h2", "h3", "h4")] == [0, 1, 2, 3]
    return g


def test_the_two_levels_and_the_ps_unicast_link_by_link():
    loads = wire_model.atp_loads(_leaf_spine(), ["h1", "h2", "h3", "h4"], BLOCKS * FB)
    expected = {
        ("h2", "l1"): 100, ("h3", "l2"): 100, ("h4", "l2"): 100,   # each worker's frames to its ToR
        ("l2", "s1"): 100, ("s1", "l1"): 100,                      # rack l2's one aggregated stream
        ("l1", "h1"): 100,                                         # the PS's ToR's one stream to the PS
        ("h1", "l1"): 300,                                         # results: one per worker, unicast
        ("l1", "h2"): 100, ("l1", "s1"): 200, ("s1", "l2"): 200, ("l2", "h3"): 100, ("l2", "h4"): 100,
    }
    assert {edge: round(b / FB) for edge, b in loads.items() if b} == expected


def test_what_falls_back_crosses_to_the_ps_alone():
    loads = wire_model.atp_loads(_leaf_spine(), ["h1", "h2", "h3", "h4"], BLOCKS * FB, fallback=0.5)
    # half of each worker's frames aggregated as above, the other half straight to the PS
    assert round(loads["l2", "s1"] / FB) == 50 + 2 * 50
    assert round(loads["l1", "h1"] / FB) == 50 + 3 * 50
    assert round(loads["h3", "l2"] / FB) == 100


def test_the_wire_time_is_the_ps_links_results():
    g = topologies.single_switch(4, bw=10)
    g.graph["buckets"] = False                       # the pure bytes
    spec = RunSpec(algorithm="atp", workers=4, bw=10, elements=BLOCKS * wire.K, dtype="int32")
    # the busiest direction: the PS's link down, 3 results x 100 frames
    assert wire_model.wire_seconds(spec, g) == pytest.approx(300 * FB * 8 / 10e6)


def test_tenants_share_the_links():
    g = _leaf_spine()
    g.graph["buckets"] = False
    one = wire_model.atp_seconds(RunSpec(algorithm="atp", workers=4, bw=10, elements=BLOCKS * wire.K,
                                         dtype="int32"), g)
    # two jobs of 2 (h1+h3 with the PS h1, h2+h4 with the PS h2): each PS's link down carries
    # 1 result stream, but l1-s1 carries both jobs' results to rack l2: 2 x 100 frames
    two = wire_model.atp_seconds(RunSpec(algorithm="atp", workers=2, jobs=2, bw=10, elements=BLOCKS * wire.K,
                                         dtype="int32"), g)
    assert one == pytest.approx(300 * FB * 8 / 10e6)
    assert two == pytest.approx(200 * FB * 8 / 10e6)


def test_with_multicast_the_ps_sends_one_copy_and_its_tor_one_per_worker():
    loads = wire_model.atp_loads(_leaf_spine(), ["h1", "h2", "h3", "h4"], BLOCKS * FB, multicast=True)
    down = {edge: round(b / FB) for edge, b in loads.items() if b and edge[0] in ("h1", "l1", "s1", "l2")
            and edge[1] in ("h1", "h2", "h3", "h4", "s1", "l2", "l1")}
    assert down[("h1", "l1")] == 100                 # one copy of each result, not three
    assert down[("l1", "h2")] == 100 and down[("l1", "s1")] == 200 and down[("s1", "l2")] == 200
    assert down[("l2", "h3")] == 100 and down[("l2", "h4")] == 100


def test_multicast_takes_the_ps_link_off_the_critical_path():
    g = topologies.single_switch(4, bw=10)
    g.graph["buckets"] = False
    spec = RunSpec(algorithm="atp", workers=4, bw=10, elements=BLOCKS * wire.K, dtype="int32", atp_multicast=True)
    # every link now carries one stream each way: 100 frames
    assert wire_model.wire_seconds(spec, g) == pytest.approx(100 * FB * 8 / 10e6)
