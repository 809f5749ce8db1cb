"""The links of a network spread over servers: veth pairs inside a server, a VXLAN tunnel
between two (modelled on Mininet's `RemoteGRELink.makeTunnel`; this kernel has no GRE).

A tunnelled link is `ip link add NAME type vxlan id VNI local A remote B dstport 4789` on
each side, one VNI per link, so the two servers' kernels join exactly the two interfaces the
graph names; placement keeps hosts with their edge switch, so tunnel ends are switch ports in
the servers' root namespaces (a host end would be created inside the host's namespace, as
`RemoteGRELink` moves its gretap there). Each end's MTU leaves room for VXLAN's 50 bytes on
a 1500-byte underlay (the hosts' NICs get the same MTU, as RemoteGRELink does for GRE).
Everything a server needs is one `ip -batch`, one shell script (no IPv6, no offloads, up)
and one `tc -batch`, over its ssh connection. BMv2's veth ports keep their offloads, as on one
machine (emulation/veths.py quiet_ends says why); tunnel ends never have them.
"""

from __future__ import annotations

import networkx as nx

VXLAN_PORT = 4789
MTU = 1450


def server_lines(g: nx.Graph, placement: dict[str, str], pids: dict[str, int], addresses: dict[str, str],
                 group: int, vni_base: int, veth_offloads_off: bool = True
                 ) -> dict[str, tuple[list[str], list[str], list[str]]]:
    """Per server: (`ip -batch` lines, shell lines, `tc -batch` lines) that make its links.
    `pids`: each node's shell pid on its server (a host's namespace); `veth_offloads_off`:
    turn the offloads of root-namespace veth ends off too (the software switch)."""
    from agglab.emulation.veths import htb_lines  # lazy: loads Mininet, only server_lines() needs it

    out: dict[str, tuple[list[str], list[str], list[str]]] = {s: ([], [], []) for s in addresses}
    root_ends: dict[str, list[str]] = {s: [] for s in addresses}
    tunnel_ends: set[str] = set()
    for i, (u, v, e) in enumerate(sorted(g.edges(data=True), key=lambda x: (x[0], x[1]))):
        su, sv = placement[u], placement[v]
        if su == sv:
            ends = sorted((u, v), key=lambda n: g.nodes[n]["kind"] == "host")    # root end first
            a, b = e["intfs"][ends[0]], e["intfs"][ends[1]]
            inside = g.nodes[ends[1]]["kind"] == "host"
            out[su][0].append(f"link add name {a} group {group} type veth peer name {b}"
                              + (f" netns {pids[ends[1]]}" if inside else ""))
            root_ends[su] += [a] if inside else [a, b]
            continue
        vni = vni_base + i + 1
        for n, other in ((u, v), (v, u)):
            s = placement[n]
            name = e["intfs"][n]
            host = g.nodes[n]["kind"] == "host"
            out[s][0].append(f"link add name {name} group {group} mtu {MTU} type vxlan id {vni} "
                             f"local {addresses[s]} remote {addresses[placement[other]]} dstport {VXLAN_PORT}"
                             + (f" netns {pids[n]}" if host else ""))
            if not host:
                root_ends[s].append(name)
                tunnel_ends.add(name)
    for s, names in root_ends.items():
        out[s][1].extend(f"echo 1 > /proc/sys/net/ipv6/conf/{n}/disable_ipv6"
                         + (f"; ethtool -K {n} rx off tx off tso off gso off gro off >/dev/null 2>&1 || true"
                            if veth_offloads_off or n in tunnel_ends else "")
                         for n in names)
        out[s][1].extend(f"ip link set dev {n} up" for n in names)
    for u, v, e in g.edges(data=True):
        if e.get("bw"):
            for n in (u, v):
                if g.nodes[n]["kind"] == "switch":
                    out[placement[n]][2].extend(htb_lines(e["intfs"][n], e["bw"]))
    return out


def apply(remote, lines: tuple[list[str], list[str], list[str]]) -> None:
    ip, sh, tc = lines
    if ip:
        remote.run("ip -batch -", input="\n".join(ip) + "\n")
    if sh:
        remote.run("sh -s", input="\n".join(sh) + "\n")
    if tc:
        remote.run("tc -batch -", input="\n".join(tc) + "\n")
