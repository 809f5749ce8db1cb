"""What a Mininet host runs to join the emulated network: its set-up script's lines.

Why a module of its own: a host's addresses, routes, static neighbours, sysctls and link
shaping all follow from the topology graph alone, so they are computed here, apart from the
Mininet nodes that run them (EmulatedNetwork._configure_hosts writes them into one script per
host, `<run>/<host>.setup.sh`, and runs every host's at once; a cluster's network ships the
scripts to its servers first). The script's last line echoes SETUP_OK, by which a host's
set-up is known to have succeeded.
"""

from __future__ import annotations

import ipaddress

import networkx as nx

from agglab.controller.topology import hosts
from agglab.ground import addresses, host_tcp, links

SETUP_OK = "agglab-host-setup-ok"      # a host's script echoes it once everything succeeded


def host_setup(g: nx.Graph, h: str, intfs: list[str],
               tcp_cc: str = host_tcp.DEFAULT_CC) -> tuple[list[str], list[str], list[str]]:
    """What host `h` runs to join the network: (shell lines, `ip -batch` lines, `tc -batch`
    lines shaping its NICs whose links have a rate). Sysctls are written to /proc/sys by the
    shell itself (`echo`: no `sysctl` process).

    Every NIC gets its address and MAC (NIC 0 the host's), loopback comes up; no IPv6
    chatter and no checksum/segmentation offloads (switches re-inject frames); no
    reverse-path filtering between the NICs of multi-NIC hosts and a route to a peer's NIC
    over the switch both hang off; every NIC knows the aggregation service and every host's
    MAC statically (no ARP in the data plane). A single-NIC host on a slow shaped link gets
    a TCP retransmission floor on its route (ground/links.py `rto_min_ms`). The host's TCP is
    pinned (ground/host_tcp.py): its buffers in the namespace, congestion control `tcp_cc` on
    every route the set-up writes; the connected routes are written again for it, deleted
    and appended in the NICs' order, the order the kernel made them in (the first NIC's
    route stays the one a multi-NIC host's subnet traffic takes)."""
    from agglab.emulation.veths import htb_lines     # lazy: here: veths imports Mininet, which importing the network does not need

    sysctls = [("ipv6/conf/all/disable_ipv6", 1), ("ipv6/conf/default/disable_ipv6", 1),
               ("ipv4/conf/all/rp_filter", 0), ("ipv4/conf/default/rp_filter", 0)]
    lines = [f"ethtool -K {intf} rx off tx off tso off gso off gro off >/dev/null 2>&1 || true"
             for intf in intfs]
    batch, shaping, connected = ["link set dev lo up"], [], []
    cc = f"congctl {host_tcp.check_cc(tcp_cc)}"
    for nbr in g.neighbors(h):
        e = g.edges[h, nbr]
        ip, mac = e["addrs"][h]
        intf = e["intfs"][h]
        batch += [f"link set dev {intf} address {mac}", f"addr replace {ip}/{addresses.PREFIX_LEN} dev {intf}",
                  f"link set dev {intf} up"]
        sysctls.append((f"ipv4/conf/{intf}/rp_filter", 0))
        net = ipaddress.ip_interface(f"{ip}/{addresses.PREFIX_LEN}").network
        route = f"{net} dev {intf} proto kernel scope link src {ip} {cc}"
        if e.get("bw"):
            shaping += htb_lines(intf, e["bw"])
            rto = links.rto_min_ms(e["bw"])
            if rto > links.RTO_MIN_MS and g.degree(h) == 1:     # the NIC's one connected route
                route += f" rto_min {rto}ms"
        connected.append((f"route del {net} dev {intf}", f"route append {route}"))
    batch += [d for d, _ in connected] + [a for _, a in connected]
    if g.degree(h) > 1:
        for sw in g.neighbors(h):
            mine = g.edges[h, sw]["intfs"][h]
            for peer in g.neighbors(sw):
                if peer != h and g.nodes[peer]["kind"] == "host":
                    ip, mac = g.edges[sw, peer]["addrs"][peer]
                    batch += [f"route replace {ip}/32 dev {mine} {cc}",
                              f"neigh replace {ip} lladdr {mac} dev {mine} nud permanent"]
    for intf in intfs:
        batch.append(f"neigh replace {addresses.SERVICE_IP} lladdr {addresses.SERVICE_MAC} "
                     f"dev {intf} nud permanent")
    for other in hosts(g):
        if other != h:
            o = g.nodes[other]
            batch.append(f"neigh replace {o['ip']} lladdr {o['mac']} dev {intfs[0]} nud permanent")
    return ([*(f"echo {value} > /proc/sys/net/{key}" for key, value in sysctls), *host_tcp.sysctl_lines(tcp_cc),
             *lines], batch, shaping)
