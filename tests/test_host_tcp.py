"""The emulated hosts' TCP is pinned in their namespaces and read back into the run's record
(ground/host_tcp.py, emulation/host_setup.py): a connection between two hosts runs the pinned
congestion control whatever the machine's root namespace sets, with Linux's default buffers.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from agglab.controller import addressing, forward, topologies
from agglab.controller.topology import hosts
from agglab.emulation.host_setup import host_setup
from agglab.ground import host_tcp

_SERVER = """
import socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], 5201)); s.listen()
print("listening", flush=True)
c, _ = s.accept()
print(c.getsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, 16).rstrip(b"\\0").decode(), flush=True)
c.recv(1)
"""
_CLIENT = """
import socket, sys
c = socket.create_connection((sys.argv[1], 5201), timeout=30)
print(c.getsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, 16).rstrip(b"\\0").decode(), flush=True)
c.sendall(b"x")
"""


def _connection_cc(net, a: str, b: str, ip: str) -> tuple[str, str]:
    """The congestion control of a TCP connection from host a to host b's address `ip`, as
    each end's socket reports it (the server says it listens before the client connects: no sleep)."""
    server = net.host(b).popen([sys.executable, "-c", _SERVER, ip], stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout.readline().strip() == "listening"
        client = net.host(a).popen([sys.executable, "-c", _CLIENT, ip], stdout=subprocess.PIPE, text=True)
        out, _ = client.communicate(timeout=60)
        return out.strip(), server.communicate(timeout=60)[0].strip()
    finally:
        server.kill()
        server.wait(timeout=30)


@pytest.mark.root
@pytest.mark.mininet
@pytest.mark.net_timeout(180)
@pytest.mark.parametrize("topology, tcp_cc", [("single", host_tcp.DEFAULT_CC), ("single", "reno"),
                                              ("bcube", host_tcp.DEFAULT_CC)])
def test_a_host_namespace_runs_the_pinned_tcp(topology, tcp_cc):
    from agglab.emulation.network import EmulatedNetwork

    g = topologies.build(topology, workers=4, bw=5.0) if topology == "single" else topologies.build(topology, k=1)
    with EmulatedNetwork(g, tcp_cc=tcp_cc) as net:
        forward.install_forwarding_all(net.clients, net.graph)
        g, names = net.graph, hosts(net.graph)
        a = names[0]
        node = net.host(a)
        assert node.cmd("cat /proc/sys/net/ipv4/tcp_rmem").split() == ["4096", "131072", "6291456"]
        assert node.cmd("cat /proc/sys/net/ipv4/tcp_wmem").split() == ["4096", "16384", "4194304"]
        for sw in g.neighbors(a):              # a peer over each of a's NICs (BCube's hosts have two)
            b = next(p for p in g.neighbors(sw) if p != a and g.nodes[p]["kind"] == "host")
            ip = g.edges[sw, b]["addrs"][b][0]
            assert _connection_cc(net, a, b, ip) == (tcp_cc, tcp_cc)
            assert _connection_cc(net, b, a, g.edges[sw, a]["addrs"][a][0]) == (tcp_cc, tcp_cc)
        record = net.host_tcp
        assert (record["congestion_control"], record["tcp_rmem"], record["tcp_wmem"], record["hosts"]) == \
            (tcp_cc, "4096 131072 6291456", "4096 16384 4194304", len(names))
        assert record["initcwnd"] == "kernel default (10 segments)"


def test_every_route_the_setup_writes_carries_the_congestion_control():
    g = addressing.assign_addresses(topologies.build("bcube", k=1))
    h = hosts(g)[0]
    intfs = [g.edges[h, n]["intfs"][h] for n in g.neighbors(h)]
    lines, batch, _ = host_setup(g, h, intfs, "reno")
    routes = [b for b in batch if b.startswith(("route append", "route replace"))]
    assert len(intfs) == 2 and routes and all(r.endswith("congctl reno") for r in routes)
    deleted = [b.split()[-1] for b in batch if b.startswith("route del")]
    appended = [b.split()[b.split().index("dev") + 1] for b in batch if b.startswith("route append")]
    assert deleted == appended == intfs                   # the connected routes again, in the NICs' order
    assert "echo '4096 131072 6291456' > /proc/sys/net/ipv4/tcp_rmem" in lines


def test_an_unknown_congestion_control_is_refused():
    with pytest.raises(ValueError, match="unknown TCP congestion control 'vegas'"):
        host_tcp.check_cc("vegas")


def test_a_run_spec_with_an_unknown_congestion_control_is_refused_before_a_network():
    from agglab.ground.runspec import RunSpec
    assert RunSpec().tcp_cc == "cubic"          # Linux's default, the pinned one
    with pytest.raises(ValueError, match=r"--tcp-cc must be one of cubic, reno, bbr, got 'vegas'"):
        RunSpec(tcp_cc="vegas").validate()


def test_the_read_back_says_what_the_routes_give_tcp():
    out = ("agglab-host-tcp bbr|4096\t131072\t6291456|4096\t16384\t4194304\n"
           "agglab-host-route 10.0.0.0/16 dev h1-eth0 proto kernel scope link src 10.0.0.1 "
           "rto_min lock 20ms congctl lock cubic\nagglab-host-route 10.1.0.9 dev h1-eth1 initcwnd 20\n"
           "agglab-host-setup-ok\n")
    got = host_tcp.parse(out)
    assert got == {"congestion_control": "bbr+cubic", "namespace_default_cc": "bbr",
                   "tcp_rmem": "4096 131072 6291456", "tcp_wmem": "4096 16384 4194304", "initcwnd": "20",
                   "route_options": ["initcwnd 20", "rto_min 20ms congctl cubic"]}
    assert host_tcp.parse("agglab-host-setup-ok\n") is None
    assert host_tcp.summary({"h1": got, "h2": dict(got)}) == {**got, "hosts": 2}
    assert host_tcp.summary({"h1": got, "h2": None})["differ"] is True


def test_the_report_says_the_hosts_tcp_of_its_runs():
    from agglab.experiments.report import _host_tcp

    t = {"congestion_control": "cubic", "tcp_rmem": "4096 131072 6291456", "tcp_wmem": "4096 16384 4194304",
         "initcwnd": "kernel default (10 segments)", "hosts": 8}
    rows = [{"host_tcp": t}, {"host_tcp": dict(t)}, {"host_tcp": {"differ": True, "per_host": {}}}, {}]
    assert _host_tcp(rows) == [
        "| hosts' TCP (read in their namespaces) | cubic, tcp_rmem 4096 131072 6291456, tcp_wmem 4096 16384 4194304, "
        "initcwnd kernel default (10 segments) (2 runs) |",
        "| hosts' TCP (read in their namespaces) | differs between hosts (1 run) |"]
