"""Programs p4src/include/forward.p4: ordinary L3 (ipv4_lpm) and L2 (l2_exact) forwarding.

Routes come from the shared topology graph (shortest paths over live links), so no
port number is written by hand. Where several neighbours are equally short, the route to
host number i from switch number s takes the (i + s)-th of them, as the two-level tables of
Al-Fares et al.'s fat-tree spread destinations over uplinks: on the k=8 fat-tree with 128
workers every agg-core link carries the same 112 of the 16,256 worker pairs, where
breadth-first order sent all cross-pod traffic through the first core (and a hash of
(switch, host) left links between 60 and 172). controller/forwarding_job.py recomputes them
when a link fails, for the host baselines whose TCP traffic must find the new path.
Broadcast frames are flooded only along a spanning tree of the switches, so a topology
with loops (fat-tree, BCube) cannot loop a flood.
"""

from __future__ import annotations

import networkx as nx

from agglab.controller.switch_batches import run_batches
from agglab.controller.switch_client import SwitchClient, parse_handle, table_add_line
from agglab.controller.topology import hosts, port, switches
from agglab.controller.trees.base import is_live

FLOOD_GROUP = 1000          # multicast group id reserved for L2 flooding
BROADCAST_MAC = "ff:ff:ff:ff:ff:ff"


def plain_live_graph(g: nx.Graph) -> nx.Graph:
    """The live links as a plain graph (no attributes): breadth-first search through
    live_graph's filtered view tests each edge's liveness again at every step, which made the
    paper suite's dry run (thousands of routes) take 40 s."""
    live = nx.Graph()
    live.add_nodes_from(n for n, d in g.nodes(data=True) if d.get("up", True) is not False)
    live.add_edges_from((u, v) for u, v in g.edges if is_live(g, u, v))
    return live


def next_hops(g: nx.Graph, switch: str, live: nx.Graph | None = None) -> dict[str, str]:
    """For every host reachable over live links, the neighbour of `switch` on a shortest path
    to it: of the equally short ones (switches, or the host itself, before a host that would
    have to relay) the (host number + switch number)-th, in the graph's node order. Each hop
    is one step closer to the host, so the routes cannot loop. `live`: plain_live_graph(g),
    when the caller asks for many switches of one graph state."""
    live = plain_live_graph(g) if live is None else live
    if switch not in live:
        return {}
    mine = nx.single_source_shortest_path_length(live, switch)
    theirs = {n: nx.single_source_shortest_path_length(live, n) for n in live.neighbors(switch)}
    out = {}
    offset = list(g.nodes).index(switch)
    for i, h in enumerate(hosts(g)):
        if h == switch or h not in mine:
            continue
        closer = sorted(n for n, dist in theirs.items() if dist.get(h) == mine[h] - 1)
        direct = [n for n in closer if n == h or g.nodes[n]["kind"] == "switch"]
        choices = direct or closer
        out[h] = choices[(i + offset) % len(choices)]
    return out


def ipv4_routes(g: nx.Graph, switch: str) -> dict[str, tuple[str, int]]:
    """ipv4_lpm on one switch: prefix -> (destination MAC, out port)."""
    routes = {f"{g.nodes[h]['ip']}/32": (g.nodes[h]["mac"], port(g, switch, hop))
              for h, hop in next_hops(g, switch).items()}
    for nbr in g.neighbors(switch):        # extra NICs of multi-NIC hosts: only via their own link
        if g.nodes[nbr]["kind"] == "host" and g.edges[switch, nbr]["ports"][nbr] != 0:
            ip, mac = g.edges[switch, nbr]["addrs"][nbr]
            routes[f"{ip}/32"] = (mac, port(g, switch, nbr))
    return routes


def flood_ports(g: nx.Graph, switch: str) -> list[int]:
    """Host ports plus ports on a BFS spanning tree of the switch subgraph."""
    return _flood_ports(g, switch, _flood_tree(g))


def _flood_tree(g: nx.Graph) -> nx.Graph:
    sw = switches(g)
    return nx.bfs_tree(g.subgraph(sw), sw[0]).to_undirected() if sw else nx.Graph()


def _flood_ports(g: nx.Graph, switch: str, tree: nx.Graph) -> list[int]:
    ports = []
    for nbr in g.neighbors(switch):
        if g.nodes[nbr]["kind"] == "host" or tree.has_edge(switch, nbr):
            ports.append(port(g, switch, nbr))
    return sorted(ports)


def forwarding_lines(g: nx.Graph, switch: str, flood: list[int] | None = None) -> list[str]:
    """A switch's forwarding as command lines, all but what needs the flood node's handle:
    L3 routes and L2 entries per host, the flood group and its node (the last line; its
    answer goes to flood_lines). `flood`: the flood ports, when the caller has them."""
    lines = []
    for prefix, (mac, out) in ipv4_routes(g, switch).items():
        lines += [table_add_line("ipv4_lpm", "ipv4_forward", [prefix], [mac, out]),
                  table_add_line("l2_exact", "l2_forward", [mac], [out])]
    ports = flood_ports(g, switch) if flood is None else flood
    return lines + [f"mc_mgrp_create {FLOOD_GROUP}", f"mc_node_create 0 {' '.join(map(str, ports))}"]


def flood_lines(switch: str, node_answer: str) -> list[str]:
    """The rest of a switch's forwarding, given the answer to forwarding_lines' last line:
    the flood node joins its group, broadcasts go to the group."""
    handle = parse_handle(switch, "mc_node_create", node_answer)
    return [f"mc_node_associate {FLOOD_GROUP} {handle}",
            table_add_line("l2_exact", "l2_flood", [BROADCAST_MAC], [FLOOD_GROUP])]


def install_forwarding(client: SwitchClient, g: nx.Graph, switch: str) -> int:
    """Install L3 routes and L2 entries on one switch; returns the number of entries."""
    first = forwarding_lines(g, switch)
    client.commands(flood_lines(switch, client.commands(first)[-1]))
    return _entries(first)


def _entries(first: list[str]) -> int:
    """Table entries forwarding_lines + flood_lines add: its lines but the group and node
    lines, and the broadcast entry."""
    return len(first) - 2 + 1


def install_forwarding_all(clients: dict[str, SwitchClient], g: nx.Graph) -> int:
    """install_forwarding on every switch, in two batches per switch sent to all switches
    before any answer is read (run_batches): 2 round trips per switch instead of one per
    entry, which with the 80 switches of a k=8 fat-tree was most of programming them.
    Returns the number of entries."""
    tree = _flood_tree(g)
    first = {sw: forwarding_lines(g, sw, _flood_ports(g, sw, tree)) for sw in switches(g)}
    answers = run_batches(clients, first)
    run_batches(clients, {sw: flood_lines(sw, outs[-1]) for sw, outs in answers.items()})
    return sum(_entries(lines) for lines in first.values())
