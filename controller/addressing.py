"""Addresses on the topology graph: which host interface has which IP and MAC.

The address arithmetic itself (host_ip, SERVICE_IP, ...) is in ground/addresses.py.
"""

from __future__ import annotations

import networkx as nx

from agglab.controller.topology import hosts
from agglab.ground.addresses import host_ip, host_mac, nic_ip, nic_mac


def assign_addresses(g: nx.Graph) -> nx.Graph:
    """Give every host an IP and MAC (in natural name order), stored on the node, and every
    host interface its own address on the edge (`addrs[host] = (ip, mac)`): multi-NIC hosts
    (BCube servers) are addressed per NIC; NIC 0 carries the node's address."""
    for index, h in enumerate(hosts(g), start=1):
        g.nodes[h].setdefault("ip", host_ip(index))
        g.nodes[h].setdefault("mac", host_mac(index))
        for nbr in g.neighbors(h):
            edge = g.edges[h, nbr]
            nic = edge["ports"][h]
            edge.setdefault("addrs", {})[h] = ((g.nodes[h]["ip"], g.nodes[h]["mac"]) if nic == 0
                                               else (nic_ip(index, nic), nic_mac(index, nic)))
    return g


def interface_address(g: nx.Graph, host: str, nbr: str) -> tuple[str, str]:
    """(ip, mac) of the host's interface that faces `nbr`."""
    return tuple(g.edges[host, nbr]["addrs"][host])
