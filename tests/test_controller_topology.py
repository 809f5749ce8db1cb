"""The shared graph: deterministic ports/interfaces/addresses, routes that follow it."""

import networkx as nx
import pytest

from agglab.controller import addressing, forward
from agglab.ground import addresses
from agglab.controller.topology import assign_ports, natural_key, neighbor_on_port, port, single_switch, workers


def test_single_switch_ports_follow_natural_order():
    g = single_switch(12)
    assert [port(g, "s1", f"h{i}") for i in range(1, 13)] == list(range(1, 13))
    assert all(port(g, f"h{i}", "s1") == 0 for i in range(1, 13))
    assert g.edges["h10", "s1"]["intfs"] == {"h10": "h10-eth0", "s1": "s1-eth10"}
    assert workers(g) == [f"h{i}" for i in range(1, 13)]
    assert neighbor_on_port(g, "s1", 10) == "h10"


def test_addresses_unique_and_in_ten_slash_eight():
    g = addressing.assign_addresses(single_switch(300))
    ips = [g.nodes[h]["ip"] for h in g if g.nodes[h]["kind"] == "host"]
    macs = [g.nodes[h]["mac"] for h in g if g.nodes[h]["kind"] == "host"]
    assert len(set(ips)) == 300 and len(set(macs)) == 300
    assert all(ip.startswith("10.0.") and not ip.endswith((".0", ".255")) for ip in ips)
    assert addresses.SERVICE_IP not in ips


def test_routes_and_flood_tree_on_a_looped_topology():
    g = nx.Graph()
    for s in ("s1", "s2", "s3"):
        g.add_node(s, kind="switch")
    g.add_edges_from([("s1", "s2"), ("s2", "s3"), ("s3", "s1")])
    for i, s in enumerate(("s1", "s2", "s3"), start=1):
        g.add_node(f"h{i}", kind="host", rank=i - 1)
        g.add_edge(f"h{i}", s)
    addressing.assign_addresses(assign_ports(g))
    hops = forward.next_hops(g, "s1")
    assert hops == {"h1": "h1", "h2": "s2", "h3": "s3"}
    # the flood tree spans the switches without a cycle: 2 of the 3 inter-switch links
    inter = sum(len([p for p in forward.flood_ports(g, s) if neighbor_on_port(g, s, p).startswith("s")])
                for s in ("s1", "s2", "s3"))
    assert inter == 4


def test_natural_key():
    assert sorted(["h10", "h2", "h1"], key=natural_key) == ["h1", "h2", "h10"]


def test_bad_worker_count():
    with pytest.raises(ValueError, match="need at least one worker"):
        single_switch(0)
