"""Which server each node runs on: Mininet's `SwitchBinPlacer` (switches in even bins, each
host with its switch, so no host link crosses servers).

The switches are handed to it in an order that keeps neighbours together (a breadth-first
walk from the graph's edge switches, pod by pod on a fat-tree), because the placer bins them
in the order given: fewer links cross servers, fewer tunnels.
"""

from __future__ import annotations

import networkx as nx
from mininet.examples.cluster import SwitchBinPlacer

from agglab.controller.topology import hosts, switches


def switch_order(g: nx.Graph) -> list[str]:
    """Each edge switch (one with hosts) followed by its switch neighbours that are not yet
    listed and also touch an edge switch (a fat-tree pod's aggregation switches); the other
    switches (the core) last."""
    sws = switches(g)
    edge = {s for s in sws if any(g.nodes[n]["kind"] == "host" for n in g.neighbors(s))}
    near_edge = {s for s in sws if any(n in edge for n in g.neighbors(s))}
    order: list[str] = []
    for e in (s for s in sws if s in edge):
        for s in [e, *sorted((n for n in g.neighbors(e) if n in near_edge and n not in edge),
                             key=sws.index)]:
            if s not in order:
                order.append(s)
    return order + [s for s in sws if s not in order]


def place(g: nx.Graph, servers: list[str]) -> dict[str, str]:
    """node -> server name for every host and switch of `g`."""
    placer = SwitchBinPlacer(servers=list(servers), switches=switch_order(g), hosts=hosts(g),
                             links=[(u, v) for u, v in g.edges])
    return {n: placer.place(n) for n in [*switches(g), *hosts(g)]}


def crossing(g: nx.Graph, placement: dict[str, str]) -> list[tuple[str, str]]:
    """The links whose ends are on different servers (tunnels)."""
    return [(u, v) for u, v in g.edges if placement[u] != placement[v]]
