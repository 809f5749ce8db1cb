"""controller/forwarding_job.py on an in-process k=4 fat-tree of real software-switch pipelines.

Why: the host baselines survive a link failure only if the switches' IP routes move off
the dead link; here TCP frames are walked hop by hop through the real pipelines the
controller programmed, before and after failures, without root or Mininet.
"""

from __future__ import annotations

import itertools
import time

import pytest
from scapy.layers.inet import IP, TCP
from scapy.layers.l2 import ARP, Ether

from agglab.controller import forward, topologies
from agglab.controller.addressing import assign_addresses
from agglab.controller.forwarding_job import ForwardingJob
from agglab.controller.topology import neighbor_on_port, port, switches, workers as worker_hosts
from agglab.testkit.treenet import PipeClient


def build(tmp_path):
    g = assign_addresses(topologies.build("fattree", k=4, workers=8))
    clients = {sw: PipeClient(sw) for sw in switches(g)}
    for sw in switches(g):
        forward.install_forwarding(clients[sw], g, sw)      # as the session does before the job
    workers = worker_hosts(g)
    return g, clients, workers, ForwardingJob(g, clients, workers, 1, tmp_path / "epoch.json").start()


def walk(g, clients, src: str, dst: str) -> list[str] | None:
    """The nodes a TCP segment from src to dst visits through the pipelines; None if it is
    dropped (or would cross a link that is down)."""
    frame = bytes(Ether(src=g.nodes[src]["mac"], dst=g.nodes[dst]["mac"])
                  / IP(src=g.nodes[src]["ip"], dst=g.nodes[dst]["ip"]) / TCP(sport=40000, dport=29500)
                  / (b"x" * 100))
    [sw] = g.neighbors(src)
    path, here, in_port = [src, sw], sw, port(g, sw, src)
    for _ in range(len(g)):
        if not g.edges[path[-2], path[-1]].get("up", True):
            return None
        out = clients[here].pipeline.process(in_port, frame)
        if len(out) != 1:
            return None
        out_port, frame = out[0]
        nxt = neighbor_on_port(g, here, out_port)
        path.append(nxt)
        if not g.edges[here, nxt].get("up", True):
            return None
        if g.nodes[nxt]["kind"] == "host":
            return path if nxt == dst else None
        in_port, here = port(g, nxt, here), nxt
    return None


def all_paths(g, clients, workers) -> dict:
    return {(a, b): walk(g, clients, a, b) for a, b in itertools.permutations(workers, 2)}


def links(path) -> set:
    return {frozenset(e) for e in zip(path, path[1:])}


def entries(clients) -> dict:
    return {sw: c.command("table_num_entries ipv4_lpm") for sw, c in clients.items()}


def test_routes_move_off_a_failed_link_and_back(tmp_path):
    g, clients, workers, job = build(tmp_path)
    before = all_paths(g, clients, workers)
    assert all(before.values()), [k for k, v in before.items() if not v]
    used = set().union(*(links(p) for p in before.values()))
    assert used == {frozenset(e) for e in job.treeset.edges}          # the job knows what its traffic crosses
    counts = entries(clients)
    # a core link some cross-pod pair uses
    a, b = next(tuple(e) for p in before.values() for e in links(p)
                if {g.nodes[n].get("tier") for n in e} == {"agg", "core"})
    job.link_changed(a, b, False, time.monotonic())
    job.link_changed(b, a, False, time.monotonic())                  # the other end: ignored
    after = all_paths(g, clients, workers)
    assert all(after.values()), [k for k, v in after.items() if not v]
    assert not any(frozenset((a, b)) in links(p) for p in after.values())
    assert not job.treeset.uses(a, b) and job.treeset.epoch == 1
    (record,) = job.failure_records()
    assert record["link"] == f"{a}-{b}" and record["epoch"] == 1 and record["entries_changed"] > 0
    assert entries(clients) == counts                                # modified in place, nothing added
    assert job.partitioned is None
    job.link_changed(a, b, True, time.monotonic())
    assert all_paths(g, clients, workers) == before                  # shortest paths again
    assert len(job.failure_records()) == 1


def test_a_link_no_worker_route_crosses_changes_nothing(tmp_path):
    g, clients, workers, job = build(tmp_path)
    spare = next(h for h in g.nodes if g.nodes[h]["kind"] == "host" and h not in workers)
    [sw] = g.neighbors(spare)
    job.link_changed(spare, sw, False, time.monotonic())
    assert job.failure_records() == [] and job.treeset.epoch == 0
    assert "no_reinstall" in " ".join(job.events.lines())


def test_a_partition_is_announced(tmp_path):
    g, clients, workers, job = build(tmp_path)
    [sw] = g.neighbors(workers[3])
    job.link_changed(workers[3], sw, False, time.monotonic())
    (record,) = job.failure_records()
    assert record["partitioned"] and workers[3] in job.partitioned
    assert "partitioned" in " ".join(job.events.lines())


@pytest.mark.parametrize("topology", ["single", "leafspine"])
def test_every_worker_reaches_every_other(tmp_path, topology):
    g = assign_addresses(topologies.build(topology, workers=6))
    clients = {sw: PipeClient(sw) for sw in switches(g)}
    for sw in switches(g):
        forward.install_forwarding(clients[sw], g, sw)
    workers = worker_hosts(g)
    ForwardingJob(g, clients, workers, 1, tmp_path / "epoch.json").start()
    assert all(all_paths(g, clients, workers).values())


def test_ring_routes_are_the_neighbours_paths(tmp_path):
    """`--fail tree@x` must pick a link the ring's traffic crosses: its Routes are the paths
    between ring neighbours (both ways: data and ACKs), not every pair's."""
    g, clients, workers, everyone = build(tmp_path)
    ring = ForwardingJob(g, clients, workers, 1, tmp_path / "ring.json", algorithm="ring").start()
    n = len(workers)
    walked = [walk(g, clients, workers[r], workers[(r + d) % n]) for r in range(n) for d in (1, -1)]
    assert {frozenset(e) for e in ring.treeset.edges} == set().union(*(links(p) for p in walked))
    assert ring.treeset.edges <= everyone.treeset.edges
    everyone.prepare(1, "ring")                                        # the session's call before a run
    assert everyone.treeset.edges == ring.treeset.edges and everyone.algorithm == "ring"


def flood(g, clients, src: str) -> list[str]:
    """The hosts an ARP broadcast from src reaches through the pipelines, once per copy."""
    frame = bytes(Ether(src=g.nodes[src]["mac"], dst="ff:ff:ff:ff:ff:ff") / ARP(psrc=g.nodes[src]["ip"]))
    [sw] = g.neighbors(src)
    todo, reached = [(sw, port(g, sw, src))], []
    for _ in range(10 * len(g)):                   # a loop would never end: bounded, and fails below
        if not todo:
            break
        here, in_port = todo.pop()
        for out_port, copy in clients[here].pipeline.process(in_port, frame):
            nxt = neighbor_on_port(g, here, out_port)
            if g.nodes[nxt]["kind"] == "host":
                reached.append(nxt)
            else:
                todo.append((nxt, port(g, nxt, here)))
    assert not todo, "the flood did not end: it loops"
    return reached


@pytest.mark.parametrize("topology", ["single", "leafspine", "fattree"])
def test_forwarding_sent_to_all_switches_at_once_routes_and_floods(topology):
    """install_forwarding_all (the session's: two batches per switch) alone, no job: every
    worker's segments reach every other worker, and a broadcast reaches each host once."""
    g = assign_addresses(topologies.build(topology, workers=6))
    clients = {sw: PipeClient(sw) for sw in switches(g)}
    hosts = [h for h in g if g.nodes[h]["kind"] == "host"]
    assert forward.install_forwarding_all(clients, g) == sum(2 * len(hosts) + 1 for _ in clients)
    assert all(all_paths(g, clients, worker_hosts(g)).values())
    for h in hosts:
        assert sorted(flood(g, clients, h)) == sorted(set(hosts) - {h})     # pruned at ingress, no loop


def test_routes_spread_every_destination_over_the_cores_evenly():
    """k=8 fat-tree, 128 workers: of the 128 x 127 ordered worker pairs, 128 x 112 are in
    different pods and cross exactly one agg->core link each; there are 8 pods x 4 aggs x 4
    uplinks = 128 such links, so each carries 112 pairs. Every route is a shortest path."""
    import networkx as nx

    g = assign_addresses(topologies.build("fattree", k=8, workers=128))
    hops = {sw: forward.next_hops(g, sw) for sw in switches(g)}
    ws = worker_hosts(g)
    assert len(ws) == 128
    crossings: dict[tuple[str, str], int] = {}
    for a, b in itertools.permutations(ws, 2):
        path = [a, next(iter(g.neighbors(a)))]
        while path[-1] != b:
            path.append(hops[path[-1]][b])
        assert len(path) - 1 == nx.shortest_path_length(g, a, b)
        for u, v in zip(path, path[1:]):
            if u.startswith("a") and v.startswith("c"):
                crossings[(u, v)] = crossings.get((u, v), 0) + 1
    assert len(crossings) == 128 and set(crossings.values()) == {112}
