"""Cluster mode's pure pieces: placement (hosts with their edge switch) and the per-server
link lines (veths inside a server, one VXLAN VNI per link between two)."""

from __future__ import annotations

import pytest

pytest.importorskip("mininet")


def _fattree():
    from agglab.controller import topologies
    from agglab.controller.addressing import assign_addresses
    from agglab.ground.runspec import RunSpec

    return assign_addresses(topologies.for_run(RunSpec(topology="fattree", k=4, workers=8, tree="rat")))


def test_placement_keeps_hosts_with_their_edge_switch_and_uses_every_server():
    from agglab.emulation.cluster.placement import crossing, place

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
    from agglab.emulation.cluster.links import VXLAN_PORT, server_lines
    from agglab.emulation.cluster.placement import crossing, place

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



def test_bmv2_veth_ports_keep_their_offloads_and_tunnel_ends_never_have_them():
    """As on one machine, BMv2's veth ports keep their offloads (emulation/veths.py quiet_ends
    says why); a VXLAN end's are always off; the software switch's are all off."""
    from agglab.emulation.cluster.links import server_lines
    from agglab.emulation.cluster.placement import crossing, place

    g = _fattree()
    p = place(g, ["s1", "s2"])
    pids = {n: 1000 + i for i, n in enumerate(g.nodes)}
    addrs = {"s1": "192.0.2.1", "s2": "192.0.2.2"}
    tunnel_ends = {g.edges[u, v]["intfs"][n] for u, v in crossing(g, p) for n in (u, v)}
    for offloads_off in (True, False):
        lines = server_lines(g, p, pids, addrs, group=77, vni_base=4096, veth_offloads_off=offloads_off)
        off = {line.split("ethtool -K ")[1].split()[0] for _ip, sh, _tc in lines.values() for line in sh
               if "ethtool -K" in line}
        root_veths = {line.split()[3] for ip, _, _ in lines.values() for line in ip
                      if "veth" in line.split()} - tunnel_ends
        assert tunnel_ends <= off
        assert (root_veths <= off) if offloads_off else not (root_veths & off)


@pytest.mark.parametrize("extra, flag", [({"chaos": 3}, "--chaos")])
def test_what_a_cluster_cannot_run_is_refused_in_one_line_before_anything_is_built(tmp_path, extra, flag):
    from agglab.controller.run_check import check_run
    from agglab.ground.runspec import RunSpec

    f = tmp_path / "cluster.yaml"
    f.write_text("servers:\n  - {name: s1, address: 192.0.2.1}\n  - {name: s2, address: 192.0.2.2}\n")
    base = dict(topology="fattree", k=4, workers=8, tree="rat", cluster=str(f))
    for backend in ("soft", "bmv2"):                  # both data planes run on a cluster
        assert check_run(RunSpec(backend=backend, **base)).spec.cluster == str(f)
        assert check_run(RunSpec(backend=backend, hang_switch=["a1@0.5"], **base)).spec.hang_switch == ["a1@0.5"]
    with pytest.raises(ValueError, match=f"^{flag}: not supported with --cluster") as err:
        check_run(RunSpec(**base, **extra))
    assert str(err.value).startswith(f"{flag}: not supported with --cluster") and "\n" not in str(err.value)


@pytest.mark.root
def test_agent_stops_the_hosts_processes_resumes_them_and_signals_a_pid(tmp_path):
    """A BMv2 link change's quiet data plane on a server (emulation/cluster/bmv2.py): `pause`
    stops the processes in a host shell's network namespace (not the shell, nothing outside
    it), `resume` lets them go on; `signal 9 PID` kills a process there at once."""
    import contextlib
    import os
    import signal
    import subprocess
    import sys
    from pathlib import Path

    from agglab.testkit.waits import wait_until
    from tests.conftest import REPO

    def state(pid: int) -> str:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]

    shell = subprocess.Popen(["unshare", "--net", "sh", "-c", "sleep 300 & wait"])
    outside = subprocess.Popen(["sleep", "300"])
    agent = subprocess.Popen([sys.executable, "-m", "agglab.emulation.cluster.agent"], cwd=REPO, stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE)
    inside = None
    try:
        inside = int(wait_until(lambda: Path(f"/proc/{shell.pid}/task/{shell.pid}/children").read_text().split(),
                                60, "the sleep the namespaced shell starts")[0])

        def ask(line: str) -> list[bytes]:
            agent.stdin.write(line.encode() + b"\n")
            agent.stdin.flush()
            return agent.stdout.readline().split()

        assert ask(f"pause {shell.pid}") == [b"paused", b"1"]
        # a SIGSTOP takes effect when the process next runs: wait for the stop, not a moment
        wait_until(lambda: state(inside) == "T", 60, "the paused sleep to stop")
        # the shell was woken (its child stopped: SIGCHLD) and may wait for a CPU ("R") on a
        # busy machine; once it sleeps again it was not stopped: a stopped process is "T", and
        # the stop would have come before any sleep after the pause's answer
        wait_until(lambda: (state(shell.pid), state(outside.pid)) == ("S", "S"), 60,
                   "the shell and the process outside the namespace to sleep on, not stopped")
        assert ask("idle lo")[0] == b"idle"
        assert ask("resume") == [b"resumed", b"1"]
        wait_until(lambda: state(inside) == "S", 60, "the resumed sleep to sleep again")
        agent.stdin.write(f"signal 9 {outside.pid}\n".encode())
        agent.stdin.flush()
        assert outside.wait(60) == -9
    finally:
        agent.stdin.close()
        agent.wait(5)
        if inside is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(inside, signal.SIGKILL)
        for p in (shell, outside):
            p.kill()
            p.wait()


def test_agent_writes_what_it_is_put_and_reports_progress_files(tmp_path):
    """The per-server agent: `put PATH B64` replaces PATH atomically with those bytes, and a
    `*.progress` file under a watched directory comes back as `file PATH B64` when it changes."""
    import base64
    import subprocess
    import sys

    from tests.conftest import REPO

    agent = subprocess.Popen([sys.executable, "-m", "agglab.emulation.cluster.agent"], cwd=REPO, stdin=subprocess.PIPE,
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
        assert agent.wait(60) == 0                                         # the head hung up: it exits


def _two_server_line():
    """h1 - e1 | e2 - h2: e1 and h1 on s1, e2 and h2 on s2, e1-e2 a tunnel at 4 Mb/s."""
    import networkx as nx

    g = nx.Graph()
    for n, kind in (("h1", "host"), ("e1", "switch"), ("e2", "switch"), ("h2", "host")):
        g.add_node(n, kind=kind)
    g.add_edge("h1", "e1", intfs={"h1": "h1-eth0", "e1": "e1-eth1"}, bw=4.0)
    g.add_edge("e1", "e2", intfs={"e1": "e1-eth2", "e2": "e2-eth2"}, bw=4.0)
    g.add_edge("e2", "h2", intfs={"h2": "h2-eth0", "e2": "e2-eth1"}, bw=4.0)
    return g, {"h1": "s1", "e1": "s1", "e2": "s2", "h2": "s2"}


def test_cluster_fidelity_merges_each_servers_samples_on_the_heads_clock_and_counts_tunnel_loss():
    """Two servers whose clocks run 100 s and -50 s off the head's: the bottleneck, the CPU
    shares over its window, the busiest server and the frames lost in the tunnel, all by hand."""
    from agglab.emulation.cluster.fidelity import ClusterProbe, merge

    g, placement = _two_server_line()
    probe = ClusterProbe(g, placement, {"s1": None, "s2": None}, "/run/x", [("e1", "e2")])
    assert probe.intfs == {"s1": ["e1-eth1", "e1-eth2"], "s2": ["e2-eth1", "e2-eth2"]}
    times = [10.0, 10.5, 11.0, 11.5, 12.0]                      # the head's clock
    # e1-eth2 (tunnel, e1's end): 250,000 B per 0.5 s = 4 Mb/s from 10.0 to 11.5, then idle;
    # 1,000 frames out, 500 in.  e2-eth2: 990 of those frames in, 500 out.
    tunnel_s1 = [[t + 100, b, 0, p, q] for t, b, p, q in zip(times, [0, 250_000, 500_000, 750_000, 750_000],
                                                             [0, 300, 600, 1000, 1000], [0, 100, 200, 500, 500])]
    tunnel_s2 = [[t - 50, 0, b, p, q] for t, b, p, q in zip(times, [0, 240_000, 480_000, 740_000, 740_000],
                                                           [0, 100, 200, 500, 500], [0, 290, 590, 990, 990])]
    quiet = lambda off: [[t + off, 0, 0, 0, 0] for t in times]          # noqa: E731
    samples = {
        "s1": {"counters": {"e1-eth2": tunnel_s1, "e1-eth1": quiet(100)},
               # e1 used 0.75 s of CPU from 10.0 to 11.5 (half a core); an "e2" pid file on s1 is not e2
               "cpu": {"e1": [[t + 100, c] for t, c in zip(times, [1.0, 1.25, 1.5, 1.75, 1.8])],
                       "e2": [[t + 100, c] for t, c in zip(times, [0, 9, 18, 27, 36])]},
               "machine": [[t + 100, 50 * i, 100 * i] for i, t in enumerate(times)], "cores": 2},
        "s2": {"counters": {"e2-eth2": tunnel_s2, "e2-eth1": quiet(-50)},
               "cpu": {"e2": [[t - 50, c] for t, c in zip(times, [0, 0.05, 0.1, 0.15, 0.2])],
                       "rank0": [[t - 50, c] for t, c in zip(times, [0, 0.3, 0.6, 0.9, 0.9])]},
               "machine": [[t - 50, 85 * i, 100 * i] for i, t in enumerate(times)], "cores": 2},
    }
    record = merge(g, placement, probe.ends, probe.tunnels, samples, {"s1": 100.0, "s2": -50.0}, 9.0, 13.0)
    assert record["link"]["link"] == "e1->e2"
    assert record["link"]["utilisation"] == 1.0 and record["link_bound"] and not record["cpu_bound"]
    assert record["switch_cpu"] == {"e1": 0.5, "e2": 0.1}
    assert record["host_cpu_max"] == 0.6
    assert record["machine_busy"] == 0.85
    assert record["tunnels"] == {"links": 1, "frames": 1500, "lost": 10, "loss": round(10 / 1500, 6)}
    assert record["servers_sampled"] == ["s1", "s2"]


def test_cluster_fidelity_names_a_server_that_sent_no_samples():
    from agglab.emulation.cluster.fidelity import ClusterProbe, merge

    g, placement = _two_server_line()
    probe = ClusterProbe(g, placement, {"s1": None, "s2": None}, "/run/x", [("e1", "e2")])
    rows = [[t, int(t * 1e5), 0, 0, 0] for t in (0.0, 0.5, 1.0)]
    record = merge(g, placement, probe.ends, probe.tunnels,
                   {"s1": {"counters": {"e1-eth2": rows}, "cpu": {}, "machine": [], "cores": 2}},
                   {"s1": 0.0}, 0.0, 1.0)
    assert record["servers_missing"] == ["s2"] and "no samples from s2" in record["reason"]


def test_agent_samples_counters_and_a_processes_cpu_for_the_probe(tmp_path):
    """`clock`, `probe`, `probe-stop` on a real agent: lo's counters, a busy process named by
    its pid file, the machine's busy time, each sampled more than once."""
    import base64
    import json
    import os
    import subprocess
    import sys

    from agglab.testkit.waits import wait_until
    from tests.conftest import REPO

    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])        # spins until killed

    def busy_cpu() -> float:        # its CPU seconds, as /proc has them (utime + stime)
        fields = open(f"/proc/{busy.pid}/stat").read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    (tmp_path / "rank0.pid").write_text(f"{busy.pid}\n")
    agent = subprocess.Popen([sys.executable, "-m", "agglab.emulation.cluster.agent"], cwd=REPO, stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE)
    try:
        agent.stdin.write(b"clock\n")
        agent.stdin.flush()
        word, clock = agent.stdout.readline().split()
        assert word == b"clock" and float(clock) > 0
        agent.stdin.write(f"probe 0.05 {tmp_path} lo\nclock\n".encode())   # in order: sampling began
        agent.stdin.flush()
        assert agent.stdout.readline().split()[0] == b"clock"
        spun = busy_cpu()
        subprocess.run(["ping", "-c", "3", "-i", "0.2", "-q", "127.0.0.1"], capture_output=True)
        # the busy process's own CPU, not a span of wall time: under load it may get little of it
        wait_until(lambda: busy_cpu() - spun >= 0.3, what="the busy process to spin 0.3 s of CPU")
        agent.stdin.write(b"probe-stop\n")
        agent.stdin.flush()
        word, data = agent.stdout.readline().split()
        assert word == b"samples"
        got = json.loads(base64.b64decode(data))
        lo = got["counters"]["lo"]
        assert len(lo) >= 5 and lo[-1][1] > lo[0][1] and lo[-1][3] - lo[0][3] >= 6   # 3 pings, 3 replies
        cpu = got["cpu"]["rank0"]
        assert len(cpu) >= 5 and cpu[-1][1] - cpu[0][1] > 0                          # it spun, sampled
        assert all(a[1] <= b[1] for a, b in zip(cpu, cpu[1:]))                         # CPU time only grows
        assert len(got["machine"]) >= 5 and got["cores"] >= 1
    finally:
        busy.kill()
        agent.stdin.close()
        assert agent.wait(60) == 0


@pytest.mark.root
def test_agent_forwards_a_watched_interfaces_changes_from_netlink(tmp_path):
    """`links INTF,...` on a real agent in a namespace of its own: a veth end there
    going up and down comes back as `link INTF up|down T` lines, its unwatched peer does not."""
    import subprocess
    import sys

    from tests.conftest import REPO

    agent = subprocess.Popen(["unshare", "--net", "--mount", "sh", "-c",     # its own /sys, as a server has
                              f"mount -t sysfs sysfs /sys && exec {sys.executable} -m agglab.emulation.cluster.agent"],
                             cwd=REPO, stdin=subprocess.PIPE, stdout=subprocess.PIPE)

    def ip(*args):
        subprocess.run(["nsenter", "-t", str(agent.pid), "-n", "ip", "link", *args], check=True)

    try:
        agent.stdin.write(b"clock\n")              # answered once the agent runs (in its namespace)
        agent.stdin.flush()
        assert agent.stdout.readline().split()[0] == b"clock"
        ip("add", "w0", "type", "veth", "peer", "name", "other0")      # no dummy module here
        agent.stdin.write(b"links w0\n")
        agent.stdin.flush()
        assert agent.stdout.readline().split() == [b"links", b"1"]
        ip("set", "dev", "other0", "up")
        ip("set", "dev", "w0", "up")
        word, name, state, t = agent.stdout.readline().split()
        assert (word, name, state) == (b"link", b"w0", b"up") and float(t) > 0
        ip("set", "dev", "w0", "down")
        assert agent.stdout.readline().split()[:3] == [b"link", b"w0", b"down"]
    finally:
        agent.stdin.close()
        assert agent.wait(60) == 0


def test_each_server_with_an_empty_list_runs_on_none():
    """A stop with no switch started on any server passes an empty list: that is no server, not
    every server (9e5025e: `servers or self.remotes` made it every one)."""
    from agglab.emulation.cluster.network import ClusterNetwork

    net = ClusterNetwork.__new__(ClusterNetwork)           # no servers reached: only the fan-out
    net.remotes = {"s1": "remote s1", "s2": "remote s2"}
    assert net._each_server(lambda r: r, []) == []
    assert net._each_server(lambda r: r, ["s2"]) == ["remote s2"]
    assert sorted(net._each_server(lambda r: r)) == ["remote s1", "remote s2"]     # default: every server


# An agent whose clock answer and link report disagree by a second, as one round trip's
# asymmetry can make the head's offset estimate wrong: the report's own time, shifted by the
# estimate, would fall before the change was made.
_SKEWED_AGENT = """
import sys, time
for line in sys.stdin:
    words = line.split()
    if words[:1] == ["clock"]:
        print("clock", repr(time.monotonic()), flush=True)
    elif words[:1] == ["links"]:
        print("links 1", flush=True)
        print("link", words[1], "down", repr(time.monotonic() - 1.0), flush=True)
"""


def test_a_forwarded_link_event_is_dated_when_the_head_gets_it(tmp_path):
    """8fcf446: the head dates a server's link event on its own clock when the report arrives,
    never before the change was made (a failure's detection is measured from when it was made)."""
    import queue
    import subprocess
    import sys
    import time
    from types import SimpleNamespace

    from agglab.emulation.cluster.agent import AgentLink

    class Remote:
        server = SimpleNamespace(name="s1")

        def popen(self, _cmd, **kwargs):
            return subprocess.Popen([sys.executable, "-c", _SKEWED_AGENT], **kwargs)

    link = AgentLink(Remote(), tmp_path).start()
    try:
        got: queue.Queue = queue.Queue()
        made = time.monotonic()                       # the head makes the change
        assert link.watch_links(["veth1"], lambda intf, up, t: got.put((intf, up, t)), wait=60)
        intf, up, t = got.get(timeout=60)
        assert (intf, up) == ("veth1", False)
        assert made <= t <= time.monotonic()
    finally:
        link.close()
