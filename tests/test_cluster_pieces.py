"""Cluster mode's pure pieces: placement (hosts with their edge switch) and the per-server
link lines (veths inside a server, one VXLAN VNI per link between two)."""

from __future__ import annotations

import pytest

pytest.importorskip("mininet")


def _fattree():
    from controller import topologies
    from controller.addressing import assign_addresses
    from ground.runspec import RunSpec

    return assign_addresses(topologies.for_run(RunSpec(topology="fattree", k=4, workers=8, tree="rat")))


def test_placement_keeps_hosts_with_their_edge_switch_and_uses_every_server():
    from emulation.cluster.placement import crossing, place

    g = _fattree()
    p = place(g, ["s1", "s2", "s3"])
    assert set(p) == set(g.nodes)
    assert set(p.values()) == {"s1", "s2", "s3"}
    for h in (n for n in g.nodes if g.nodes[n]["kind"] == "host"):
        (edge,) = list(g.neighbors(h))
        assert p[h] == p[edge]
    cross = crossing(g, p)
    assert cross and all(p[u] != p[v] for u, v in cross)
    assert all(g.nodes[u]["kind"] == g.nodes[v]["kind"] == "switch" for u, v in cross)
    counts = [sum(1 for n in p if g.nodes[n]["kind"] == "switch" and p[n] == s) for s in ("s1", "s2", "s3")]
    assert max(counts) - min(counts) <= 1                     # switches in even bins


def test_link_lines_make_veths_inside_and_one_vxlan_per_crossing_link():
    from emulation.cluster.links import VXLAN_PORT, server_lines
    from emulation.cluster.placement import crossing, place

    g = _fattree()
    p = place(g, ["s1", "s2"])
    pids = {n: 1000 + i for i, n in enumerate(g.nodes)}
    addrs = {"s1": "192.0.2.1", "s2": "192.0.2.2"}
    lines = server_lines(g, p, pids, addrs, group=77, vni_base=4096)
    vnis = {}
    for server, (ip, sh, _tc) in lines.items():
        for line in ip:
            words = line.split()
            assert words[:3] == ["link", "add", "name"] and "group 77" in line
            if "vxlan" in words:
                vni = int(words[words.index("id") + 1])
                assert words[words.index("local") + 1] == addrs[server]
                assert words[words.index("remote") + 1] == addrs["s2" if server == "s1" else "s1"]
                assert words[words.index("dstport") + 1] == str(VXLAN_PORT)
                vnis.setdefault(vni, []).append((server, words[3]))
            else:
                assert "veth" in words
        assert sum("link set dev" in s and s.endswith(" up") for s in sh) > 0
    cross = crossing(g, p)
    assert len(vnis) == len(cross)                             # one VNI per tunnelled link
    for (u, v) in cross:
        e = g.edges[u, v]
        ends = sorted((p[n], e["intfs"][n]) for n in (u, v))
        assert any(sorted(found) == ends for found in vnis.values()), (u, v)
    host_ends = [line for ip, _, _ in lines.values() for line in ip if "netns" in line]
    assert len(host_ends) == sum(1 for n in g.nodes if g.nodes[n]["kind"] == "host")   # made in the host's netns


def test_agent_writes_what_it_is_put_and_reports_progress_files(tmp_path):
    """The per-server agent: `put PATH B64` replaces PATH atomically with those bytes, and a
    `*.progress` file under a watched directory comes back as `file PATH B64` when it changes."""
    import base64
    import subprocess
    import sys

    from tests.conftest import REPO

    agent = subprocess.Popen([sys.executable, "-m", "emulation.cluster.agent"], cwd=REPO, stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE)
    try:
        epoch = tmp_path / "epoch.json"
        payload = base64.b64encode(b'{"epoch": 3}').decode()
        agent.stdin.write(f"put {epoch} {payload}\n".encode())
        watched = tmp_path / "run1"
        watched.mkdir()
        (watched / "rank0.progress").write_bytes(b"           5           10\n")
        agent.stdin.write(f"watch {watched}\n".encode())
        agent.stdin.flush()
        words = agent.stdout.readline().split()
        assert words[:2] == [b"file", str(watched / "rank0.progress").encode()]
        assert base64.b64decode(words[2]) == b"           5           10\n"
        (watched / "rank0.progress").write_bytes(b"          10           10\n")
        words = agent.stdout.readline().split()
        assert base64.b64decode(words[2]) == b"          10           10\n"     # a change comes again
        assert epoch.read_bytes() == b'{"epoch": 3}'
        assert not list(tmp_path.glob(".*.tmp"))                          # written by rename
    finally:
        agent.stdin.close()
        assert agent.wait(5) == 0                                         # the head hung up: it exits
