"""--placement: where a --jobs run puts each job's workers (controller/topology.tenant_hosts),
which the session and the wire model both read. Expected host lists are written out from the
topologies' naming (controller/topologies.py: fat-tree edge e{n} has hosts h{2n-1}, h{2n}; pod p
has edges e{2p+1}, e{2p+2} at k=4)."""

from __future__ import annotations

import pytest

from agglab.controller import topologies
from agglab.controller.topology import tenant_hosts
from agglab.emulation.wire_model import atp_loads
from agglab.ground.runspec import RunSpec


def fattree16():
    return topologies.fat_tree(k=4, workers=16)


def test_spread_interleaves_jobs_across_pods():
    jobs = tenant_hosts(fattree16(), 4, "spread")
    assert jobs[0] == ["h1", "h5", "h9", "h13"]
    assert jobs[3] == ["h4", "h8", "h12", "h16"]


def test_packed_fills_racks_one_job_after_the_other():
    jobs = tenant_hosts(fattree16(), 4, "packed")
    assert jobs == [["h1", "h2", "h3", "h4"], ["h5", "h6", "h7", "h8"],
                    ["h9", "h10", "h11", "h12"], ["h13", "h14", "h15", "h16"]]


def test_packed_groups_by_rack_not_by_name():
    # a leaf-spine of 4 racks x 2 hosts with 4 workers ranks one host per rack (h1, h3, h5, h7);
    # 2 jobs packed take two racks each, in rack order
    g = topologies.leaf_spine(racks=4, hosts_per_rack=2, workers=4)
    assert tenant_hosts(g, 2, "packed") == [["h1", "h3"], ["h5", "h7"]]
    assert tenant_hosts(g, 2, "spread") == [["h1", "h5"], ["h3", "h7"]]


def test_a_packed_atp_job_keeps_its_traffic_inside_its_pod():
    g = fattree16()
    job = tenant_hosts(g, 4, "packed")[1]            # h5..h8: pod 1 (e3, e4; aggs a3, a4)
    loads = atp_loads(g, job, nbytes=1000.0)
    touched = {n for edge in loads for n in edge}
    assert touched <= {"h5", "h6", "h7", "h8", "e3", "e4", "a3", "a4"}
    # spread, the same job's workers sit in four pods and their streams cross the core
    spread = atp_loads(g, tenant_hosts(g, 4, "spread")[1], nbytes=1000.0)
    assert any(n.startswith("c") for edge in spread for n in edge)


def test_an_unknown_placement_is_refused_in_one_line():
    with pytest.raises(ValueError, match="--placement must be spread or packed, got 'diagonal'"):
        RunSpec(jobs=2, placement="diagonal").validate()
