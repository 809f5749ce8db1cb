"""Programs p4src/include/forward.p4: ordinary L3 (ipv4_lpm) and L2 (l2_exact) forwarding.

Routes come from the shared topology graph (shortest paths over live links), so no
port number is written by hand; controller/forwarding_job.py recomputes them when a
link fails, for the host baselines whose TCP traffic must find the new path. Broadcast frames are flooded only along a spanning tree of the
switches, so a topology with loops (fat-tree, BCube) cannot loop a flood.
"""

from __future__ import annotations

import networkx as nx

from controller.switch_client import SwitchClient
from controller.topology import hosts, port, switches
from controller.trees.base import live_graph

FLOOD_GROUP = 1000          # multicast group id reserved for L2 flooding
BROADCAST_MAC = "ff:ff:ff:ff:ff:ff"


def next_hops(g: nx.Graph, switch: str) -> dict[str, str]:
    """For every host reachable over live links, the neighbour of `switch` on a shortest path to it."""
    paths = nx.single_source_shortest_path(live_graph(g), switch)
    return {h: paths[h][1] for h in hosts(g) if h in paths and h != switch}


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
    sw = switches(g)
    tree = nx.bfs_tree(g.subgraph(sw), sw[0]).to_undirected() if sw else nx.Graph()
    ports = []
    for nbr in g.neighbors(switch):
        if g.nodes[nbr]["kind"] == "host" or tree.has_edge(switch, nbr):
            ports.append(port(g, switch, nbr))
    return sorted(ports)


def install_forwarding(client: SwitchClient, g: nx.Graph, switch: str) -> int:
    """Install L3 routes and L2 entries on one switch; returns the number of entries."""
    entries = 0
    for prefix, (mac, out) in ipv4_routes(g, switch).items():
        client.table_add("ipv4_lpm", "ipv4_forward", [prefix], [mac, out])
        client.table_add("l2_exact", "l2_forward", [mac], [out])
        entries += 2
    client.mc_group(FLOOD_GROUP, flood_ports(g, switch))
    client.table_add("l2_exact", "l2_flood", [BROADCAST_MAC], [FLOOD_GROUP])
    return entries + 1
