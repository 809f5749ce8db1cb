"""emulation/network.py's start-up: what it sets up by itself instead of through Mininet's
build() and the switches' own port preparation, and that a failure half-way leaves nothing.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from agglab.controller import topologies
from agglab.controller.topology import hosts, switches
from tests.leftovers import leftovers, new_leftovers

pytestmark = [pytest.mark.root, pytest.mark.mininet, pytest.mark.net_timeout(120)]


def _offloads(ifname: str) -> dict[str, str]:
    out = subprocess.run(["ethtool", "-k", ifname], capture_output=True, text=True, check=True).stdout
    return dict(line.split(": ", 1)[:2] for line in out.splitlines()[1:] if ": " in line and not line[0].isspace())


def test_hosts_and_switch_ports_are_set_up_and_all_links_are_one_group():
    from agglab.emulation.network import EmulatedNetwork

    before = leftovers()
    g = topologies.build("fattree", k=4, workers=4)
    with EmulatedNetwork(g) as net:
        for h in hosts(g):
            node, a = net.host(h), g.nodes[h]
            assert node.IP() == a["ip"] and node.MAC() == a["mac"]          # Mininet's view
            addr = node.cmd(f"ip -o -4 addr show dev {h}-eth0")
            assert f"inet {a['ip']}/" in addr
            assert a["mac"] in node.cmd(f"cat /sys/class/net/{h}-eth0/address")
            assert "UP" in node.cmd("ip -o link show lo").split(">")[0]
        group = net.run.link_group()
        ends = [i.name for s in switches(g) for i in net.net.get(s).intfList() if i.name != "lo"]
        in_group = {p.name for p in Path("/sys/class/net").iterdir()
                    if (p / "netdev_group").read_text().strip() == str(group)}
        for u, v, e in g.edges(data=True):         # every root-namespace end (the switches') in the run's group
            assert in_group & set(e["intfs"].values()) == {e["intfs"][n] for n in (u, v)
                                                           if g.nodes[n]["kind"] == "switch"}
        for name in ends:
            assert Path(f"/proc/sys/net/ipv6/conf/{name}/disable_ipv6").read_text().strip() == "1"
            off = _offloads(name)
            assert [off[k].split()[0] for k in ("rx-checksumming", "tx-checksumming",
                                                "generic-segmentation-offload", "generic-receive-offload")] \
                == ["off"] * 4
            assert int(Path(f"/sys/class/net/{name}/flags").read_text(), 16) & 1     # up
    assert not any(new_leftovers(before).values())


def test_a_node_that_fails_to_start_leaves_nothing_behind(monkeypatch):
    """One switch node fails while the others' shells start in parallel: start() raises
    and every shell, process and interface started so far is gone."""
    from agglab.emulation import switch_nodes
    from agglab.emulation.network import EmulatedNetwork

    real_init = switch_nodes.SoftP4Switch.__init__

    def init(self, name, *args, **kwargs):
        if name == "a3":
            raise RuntimeError("a3 refuses to start")
        real_init(self, name, *args, **kwargs)

    monkeypatch.setattr(switch_nodes.SoftP4Switch, "__init__", init)
    before = leftovers()
    net = EmulatedNetwork(topologies.build("fattree", k=4, workers=4))
    with pytest.raises(RuntimeError, match="a3 refuses"):
        net.start()
    assert net.run is None and net.net is None and net.launcher is None
    assert not any(new_leftovers(before).values())


def test_links_with_a_rate_are_shaped_at_both_ends():
    from agglab.emulation.network import EmulatedNetwork

    before = leftovers()
    g = topologies.build("leafspine", workers=4)
    shaped = {}
    for i, (u, v) in enumerate(sorted(g.edges)):
        if i % 2 == 0:                               # every other link: some shaped, some not
            g.edges[u, v]["bw"] = shaped[(u, v)] = 3.0 + i
    with EmulatedNetwork(g) as net:
        for (u, v), e in g.edges.items():
            for n in (u, v):
                name = e["intfs"][n]
                cmd = f"tc class show dev {name}"
                out = net.host(n).cmd(cmd) if g.nodes[n]["kind"] == "host" else \
                    subprocess.run(cmd.split(), capture_output=True, text=True, check=True).stdout
                if (u, v) in shaped or (v, u) in shaped:
                    rate = shaped.get((u, v), shaped.get((v, u)))
                    assert f"htb 5:1 root prio 0 rate {rate:g}Mbit" in out, (name, out)
                else:
                    assert out.strip() == "", (name, out)
    assert not any(new_leftovers(before).values())


@pytest.mark.parametrize("offloads_off", [True, False], ids=["soft", "bmv2"])
def test_switch_ends_keep_or_lose_their_offloads_as_the_backend_needs(offloads_off):
    """Software switch ports lose their offloads (softswitch/io.py re-injects frames as it got
    them); BMv2's keep theirs (with them off BMv2 ran half as fast here, docs/design/)."""
    from agglab.emulation.veths import create_veths, delete_veths

    names = ("aglt0-a", "aglt0-b")
    group = 4_000_001
    try:
        create_veths([(names[0], names[1], None)], group, offloads_off=offloads_off)
        for name in names:
            assert Path(f"/proc/sys/net/ipv6/conf/{name}/disable_ipv6").read_text().strip() == "1"
            state = _offloads(name)["rx-checksumming"].split()[0]
            assert state == ("off" if offloads_off else "on")
    finally:
        delete_veths(group, list(names))
    assert not any(Path(f"/sys/class/net/{n}").exists() for n in names)


def test_a_host_on_a_slow_link_waits_out_its_queue_before_tcp_resends():
    """The route of a host on a 0.08 Mb/s link has TCP's floor at the time the link carries
    512 full frames, 512 x 1,514 B x 8 / 80,000 b/s = 77.517 s; at 2.4 Mb/s 2,584 ms; at
    100 Mb/s (31 ms) the kernel's default 200 ms (no rto_min on the route)."""
    from agglab.emulation.network import EmulatedNetwork

    before = leftovers()
    g = topologies.build("single", workers=3)
    for (u, v), bw in zip(sorted(g.edges), (0.08, 2.4, 100.0)):
        g.edges[u, v]["bw"] = bw
    with EmulatedNetwork(g) as net:
        for (u, v), want in zip(sorted(g.edges), ("rto_min lock 77.517s", "rto_min lock 2.584s", None)):
            h = u if g.nodes[u]["kind"] == "host" else v
            routes = net.host(h).cmd("ip route show")
            if want:
                assert want in routes, (h, routes)
            else:
                assert "rto_min" not in routes and "10.0.0.0/8" in routes, (h, routes)
    assert not any(new_leftovers(before).values())
