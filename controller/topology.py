"""The topology graph: one networkx graph shared by the network builder, the tree
algorithms and the controller.

Why a single graph: port numbers, interface names and addresses are derived from it
exactly once (assign_ports / addressing.assign_addresses), so the Mininet builder
and the code that programs tables can never disagree about which port leads where.

Node attributes: kind ("host" | "switch"); hosts get rank (worker index), ip, mac.
Edge attributes: ports {node: port}, intfs {node: interface name}, bw (Mb/s or None).
"""

from __future__ import annotations

import re
from functools import lru_cache

import networkx as nx

from agglab.ground.runspec import PLACEMENTS

IFNAME_MAX = 15            # Linux IFNAMSIZ - 1: the longest interface name Mininet can give


class TopologyError(ValueError):
    """A topology that cannot be built; `line` is set when it came from a file. Here, below
    the generators (controller/topologies.py) and the file reader (controller/topology_file.py),
    because both raise it and the generators load files."""

    def __init__(self, message: str, line: int | None = None, path: str | None = None):
        self.line, self.path, self.reason = line, path, message
        where = f"{path or '<topology>'}:{line}: " if line is not None else ""
        super().__init__(where + message)


@lru_cache(maxsize=8192)
def natural_key(name: str) -> tuple:
    """Sort h2 before h10 (cached: tree algorithms sort the same few names thousands of times,
    and a standby's trees for every failure must be done before the failure comes)."""
    return tuple(int(t) if t.isdigit() else t for t in re.split(r"(\d+)", name))


def hosts(g: nx.Graph) -> list[str]:
    return sorted((n for n, d in g.nodes(data=True) if d["kind"] == "host"), key=natural_key)


def switches(g: nx.Graph) -> list[str]:
    return sorted((n for n, d in g.nodes(data=True) if d["kind"] == "switch"), key=natural_key)


def workers(g: nx.Graph) -> list[str]:
    """Hosts that take part in the allreduce, in rank order."""
    ranked = [h for h in hosts(g) if g.nodes[h].get("rank") is not None]
    return sorted(ranked, key=lambda h: g.nodes[h]["rank"])


def tenant_hosts(g: nx.Graph, jobs: int, placement: str = "spread") -> list[list[str]]:
    """Per job of a --jobs run, its worker hosts in rank order. Here, below the session and
    the wire model, so both split the hosts the same way.

    spread: job j takes worker hosts j, j+J, j+2J, ... (interleaved, so on a fat-tree the
    jobs hang off different edge switches and share the aggregation and core switches).
    packed: a job's workers fill racks, one job after the other (hosts ordered by their edge
    switch), as a scheduler that keeps a job together places it: ATP's first level (the
    workers' ToR) then has several of a job's workers to sum."""
    ranked = workers(g)
    if placement == "spread":
        return [ranked[j::jobs] for j in range(jobs)]
    if placement != "packed":
        raise ValueError(f"placement must be one of {', '.join(PLACEMENTS)}, got {placement!r}")
    by_rack = sorted(ranked, key=lambda h: (natural_key(_rack(g, h)), natural_key(h)))
    size = -(-len(by_rack) // jobs)
    return [sorted(by_rack[j * size:(j + 1) * size], key=lambda h: g.nodes[h]["rank"]) for j in range(jobs)]


def _rack(g: nx.Graph, host: str) -> str:
    """The host's rack: its `rack` attribute, else its first switch neighbour (its ToR)."""
    return g.nodes[host].get("rack") or min((n for n in g.neighbors(host) if g.nodes[n]["kind"] == "switch"),
                                            key=natural_key)


def assign_ports(g: nx.Graph) -> nx.Graph:
    """Number every node's ports deterministically (neighbours in natural order).

    Switch ports start at 1 (BMv2 convention, port 0 is often the CPU); host
    interfaces start at 0 to match Mininet's hN-eth0 naming.
    """
    for node in g.nodes:
        first = 1 if g.nodes[node]["kind"] == "switch" else 0
        for offset, nbr in enumerate(sorted(g.neighbors(node), key=natural_key)):
            edge = g.edges[node, nbr]
            edge.setdefault("ports", {})[node] = first + offset
            edge.setdefault("intfs", {})[node] = f"{node}-eth{first + offset}"
    return g


def port(g: nx.Graph, node: str, nbr: str) -> int:
    """The port of `node` that leads to `nbr`."""
    return g.edges[node, nbr]["ports"][node]


def neighbor_on_port(g: nx.Graph, node: str, number: int) -> str:
    for nbr in g.neighbors(node):
        if g.edges[node, nbr]["ports"][node] == number:
            return nbr
    raise KeyError(f"{node} has no port {number}")


def mark_link(g: nx.Graph, u: str, v: str, up: bool) -> bool:
    """Flag link u-v up or down in the shared graph (every tree and route computation skips
    a link marked down); False when it already was: the other end's netlink event."""
    edge = g.edges[u, v]
    if edge.get("up", True) == up:
        return False
    edge["up"] = up
    return True


def single_switch(workers: int, bw: float | None = None) -> nx.Graph:
    """One switch s1 with `workers` hosts h1..hN (ranks 0..N-1)."""
    if workers < 1:
        raise ValueError("need at least one worker")
    g = nx.Graph(name=f"single-switch-{workers}")
    g.add_node("s1", kind="switch")
    for i in range(1, workers + 1):
        g.add_node(f"h{i}", kind="host", rank=i - 1)
        g.add_edge(f"h{i}", "s1", bw=bw)
    return assign_ports(g)
