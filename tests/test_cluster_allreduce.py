"""Cluster mode end to end on a practice cluster of two namespaced servers: the allreduce
with a failure on the tree is exact, its nodes are on both servers with tunnels between
them, the switches and workers run on the servers (never in the head's PID namespace), and
nothing is left on any server, nor after `down`, on the head."""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from agglab.testkit.waits import wait_until
from agglab.ground.paths import RUN_ROOT
from tests.test_cluster_practice import _leftovers, _ssh, in_head_pidns

REPO = Path(__file__).resolve().parent.parent
pytestmark = [pytest.mark.cluster, pytest.mark.mininet]


@pytest.fixture(scope="module")
def cluster_file(tmp_path_factory):
    from agglab.emulation.cluster import practice

    if practice.is_up():
        pytest.skip(f"a practice cluster is already up on this machine ({practice.STATE_DIR})")
    path = tmp_path_factory.mktemp("cluster") / "cluster.yaml"
    practice.up(2, path)
    try:
        yield path
    finally:
        practice.down()
        assert _leftovers(["sshd_config"], str(practice.STATE_DIR), path) == []


def _server_leftovers(path: Path) -> list[str]:
    """What a finished run left on each server: run directories, processes besides sshd
    and this ssh's own shell, interfaces besides lo and eth0."""
    cluster = yaml.safe_load(path.read_text())
    left = []
    for s in cluster["servers"]:
        r = _ssh(cluster, s, f"ls {RUN_ROOT} 2>/dev/null; echo ---; ps -eo comm= ; echo ---; ls /sys/class/net")
        runs, procs, links = (part.split() for part in r.stdout.split("---"))
        left += [f"{s['name']}: run {x}" for x in runs]
        left += [f"{s['name']}: process {p}" for p in procs if p not in ("sshd", "bash", "sh", "ps")]
        left += [f"{s['name']}: interface {i}" for i in links if i not in ("lo", "eth0")]
    return left


@pytest.mark.net_timeout(420)
def test_allreduce_on_two_servers_with_a_tree_failure_is_exact(cluster_file):
    r = subprocess.run([sys.executable, "-m", "agglab.cli", "allreduce", "--topology", "fattree", "--k", "4",
                        "--workers", "8", "--tree", "rat", "--fail", "tree@0.5", "--cluster", str(cluster_file),
                        "--json"], capture_output=True, text=True, cwd=REPO, timeout=400)
    assert r.returncode == 0, r.stderr[-3000:]
    result = json.loads(r.stdout)
    assert result["exact"] and result["ok"], result.get("errors")
    placement = result["cluster"]["placement"]
    assert set(placement.values()) == {"s1", "s2"}                       # both servers used
    hosts = result["jobs"][0]["hosts"]
    assert len(hosts) == 8 and all(h in placement for h in hosts)
    assert result["cluster"]["tunnels"]                                  # at least one tunnelled link
    for t in result["cluster"]["tunnels"]:
        a, b = t.split("-")
        assert placement[a] != placement[b]
    assert len(result["failures"]) == 1 and result["failures"][0]["on_tree"]
    assert result["epoch"] == 1                                           # it rerouted
    fidelity = result["fidelity"]                                         # sampled on both servers
    assert fidelity["servers_sampled"] == ["s1", "s2"] and fidelity["link"]["bytes"] > 0
    assert set(fidelity["switch_cpu"]) == {n for n in placement if n[0] in "eac"}
    assert fidelity["tunnels"]["links"] == len(result["cluster"]["tunnels"]) and fidelity["tunnels"]["frames"] > 0
    assert _server_leftovers(cluster_file) == []


@pytest.mark.net_timeout(420)
def test_a_switch_stopped_on_a_server_is_declared_hung_fenced_there_and_routed_around(cluster_file):
    """`--hang-switch tree@0.5` on two servers: the switch's process on its server is SIGSTOPped
    (through the agent), the probe's pings through the ssh forward go unanswered, the switch
    is declared hung with its server-side state "stopped", killed there, and the job reroutes
    around it: exact, and nothing of the stopped switch is left on its server."""
    r = subprocess.run([sys.executable, "-m", "agglab.cli", "allreduce", "--topology", "fattree", "--k", "4",
                        "--workers", "8", "--tree", "rat", "--hang-switch", "tree@0.5", "--elements", "400000",
                        "--cluster", str(cluster_file), "--json"], capture_output=True, text=True, cwd=REPO,
                       timeout=400)
    assert r.returncode == 0, r.stderr[-3000:]
    result = json.loads(r.stdout)
    assert result["exact"] and result["ok"], result.get("errors")
    assert len(result["hangs"]) == 1, result["hangs"]
    hang = result["hangs"][0]
    assert hang["state"] == "stopped" and hang["on_tree"] and hang["install_ms"] is not None, hang
    assert hang["switch"] in result["cluster"]["placement"]
    hung = [f for f in result["failures"] if f.get("hung")]
    assert [f["switch"] for f in hung] == [hang["switch"]] and hung[0]["detect_ms"] is not None, hung
    assert "stopped answering" in result["switches_down"][hang["switch"]]
    assert result["epoch"] >= 1                                          # it rerouted
    assert _server_leftovers(cluster_file) == []                          # the stopped switch was killed there


@pytest.mark.net_timeout(420)
def test_switches_run_on_the_servers_not_on_the_head(cluster_file):
    from agglab.ground.cluster_file import load
    from agglab.emulation.session import Session
    from agglab.ground.runspec import RunSpec

    spec = RunSpec(topology="fattree", k=4, workers=8, tree="rat", elements=20_000, cluster=str(cluster_file))
    with Session(spec) as session:
        run = str(session.net.run.path)
        switch_procs = subprocess.run(["ps", "-ww", "-eo", "args="], capture_output=True, text=True).stdout
        switches = [line for line in switch_procs.splitlines()
                    if f"--control {run}/" in line and "-m agglab.softswitch" in line and not line.startswith("ssh ")]
        assert len(switches) == 20                            # all 20 run
        assert in_head_pidns(f"--control {run}/") == []       # ... on the servers, none on the head
        assert not list(Path(run).glob("*.log"))              # their logs are on the servers
        servers = {s.name: s for s in load(cluster_file).servers}
        cluster = yaml.safe_load(cluster_file.read_text())
        for name, server in servers.items():
            on_it = [s for s, where in session.net.placement.items() if where == name
                     and session.g.nodes[s]["kind"] == "switch"]
            r = _ssh(cluster, {"user": server.user, "address": server.address}, f"ls {run}")
            assert {f"{s}.log" for s in on_it} <= set(r.stdout.split()), r.stdout
        result = session.allreduce()
        assert result["exact"], result.get("errors")
    assert _server_leftovers(cluster_file) == []
    assert in_head_pidns(run) == [] and not Path(run).exists()


@pytest.mark.net_timeout(420)
def test_a_link_taken_down_on_a_server_itself_reaches_the_controller(cluster_file):
    """Not through the head's set_link: `ip link set ... down` on the server, as a pulled
    cable would be. The server's agent forwards netlink's event, the controller logs the
    link down and up again, and the next allreduce is exact."""

    from agglab.emulation.session import Session
    from agglab.ground.runspec import RunSpec

    spec = RunSpec(topology="fattree", k=4, workers=8, tree="rat", elements=20_000, cluster=str(cluster_file))
    with Session(spec) as session:
        u, v = session.net.tunnels[0]
        intf = session.g.edges[u, v]["intfs"][u]
        remote = session.net.net.get(u).remote

        def logged(kind: str) -> list[dict]:
            with contextlib.suppress(AssertionError):
                return wait_until(lambda: [info for _, info in session.events.of_kind(kind)
                                           if set(info["link"].split("-")) == {u, v}], 60, kind)
            return []

        remote.run(f"ip link set dev {intf} down")
        down = logged("link_down")
        assert down and down[0]["intf"] == intf, session.events.lines()
        remote.run(f"ip link set dev {intf} up")
        assert logged("link_up"), session.events.lines()
        result = session.allreduce()
        assert result["exact"], result.get("errors")
    assert _server_leftovers(cluster_file) == []


@pytest.mark.bmv2
@pytest.mark.slow
@pytest.mark.net_timeout(600)
def test_bmv2_on_two_servers_with_a_tunnelled_tree_link_failing_half_way_is_exact(cluster_file):
    """`--backend bmv2 --cluster`: every simple_switch runs on a server (none in the head's PID
    namespace), on that server's interfaces, its Thrift server reached at the server's
    address; a tunnelled link of the tree taken down half-way through (its BMv2 ports removed
    while every server's workers are stopped) is rerouted and the result is exact."""
    from agglab.controller.job_protocol import partitions
    from agglab.emulation.session import Session
    from agglab.ground.cluster_file import load
    from agglab.ground.runspec import RunSpec

    spec = RunSpec(backend="bmv2", topology="fattree", k=4, workers=8, tree="rat", elements=20_000,
                   cluster=str(cluster_file))
    addresses = {s.name: s.address for s in load(cluster_file).servers}
    cluster = yaml.safe_load(cluster_file.read_text())
    with Session(spec) as session:
        net = session.net
        run = str(net.run.path)
        assert in_head_pidns(f"ipc://{run}/") == []                  # no simple_switch of the run on the head
        running = {}
        for s in cluster["servers"]:
            ps = _ssh(cluster, s, "ps -ww -eo args=").stdout.splitlines()
            running[s["name"]] = {m.group(1) for line in ps if "simple_switch" in line
                                  for m in [re.search(rf"ipc://{re.escape(run)}/(\w+)-notifications", line)] if m}
        placed = {s for s, where in net.placement.items() if session.g.nodes[s]["kind"] == "switch"}
        assert set().union(*running.values()) == placed and len(placed) == 20
        for name, sws in running.items():
            assert all(net.placement[s] == name for s in sws)       # each on the server it was placed on
        assert {net.clients[s].thrift_ip for s in placed} == set(addresses.values())
        tree = {tuple(sorted(e)) for t in session.job.trees().trees for e in t.edges}
        tunnels = [tuple(sorted(e)) for e in net.tunnels]
        workers = session.job.workers
        candidates = sorted(e for e in tree if e in tunnels and not partitions(session.g, e, workers))
        assert candidates, (tree, tunnels)
        u, v = candidates[0]
        result = session.allreduce(fail=[f"{u}-{v}@0.5"])
        assert result["exact"] and result["ok"], result.get("errors")
        assert [f["link"] for f in result["failures"]] == [f"{u}-{v}"] and result["failures"][0]["on_tree"]
        assert result["epoch"] >= 1                                   # it rerouted
    assert _server_leftovers(cluster_file) == []
    assert in_head_pidns(run) == [] and not Path(run).exists()
