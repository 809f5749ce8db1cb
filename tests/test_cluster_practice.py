"""The practice cluster: servers really apart (PID, mount, network namespaces), reached
over ssh, and nothing left after `down`."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parent.parent




def _agglab(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "agglab.cli", *args], capture_output=True, text=True,
                          cwd=REPO, timeout=90)


def _ssh(cluster: dict, server: dict, command: str) -> subprocess.CompletedProcess:
    return subprocess.run(["ssh", "-F", cluster["ssh_config"], "-o", "BatchMode=yes",
                           f"{server['user']}@{server['address']}", command],
                          capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL)


def in_head_pidns(pattern: str) -> list[str]:
    """Processes whose command line holds `pattern` and that live in the head's own PID
    namespace. (The head's namespace is the root one, whose /proc lists every descendant
    namespace's processes too, by the kernel's design; what must hold is that a server's
    processes live in the server's namespace, never in the head's.)"""
    head = os.readlink("/proc/self/ns/pid").split("[")[1].rstrip("]")
    ps = subprocess.run(["ps", "-ww", "-eo", "pidns=,pid=,args="], capture_output=True, text=True).stdout
    return [line.strip() for line in ps.splitlines()
            if pattern in line and line.split()[0] == head and "ps -ww" not in line
            and line.split()[2] != "ssh"]      # the head's ssh clients carry the servers' command lines


def _leftovers(names: list[str], state_dir: str, cluster_file: Path) -> list[str]:
    """Everything of a practice cluster the head can still see."""
    left = []
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    left += [f"namespace {n}" for n in netns.split() if re.fullmatch(r"agglab-c\d+", n)]   # not agglab-conf-*
    left += [f"interface {n}" for n in os.listdir("/sys/class/net") if n.startswith("aglc")]
    ps = subprocess.run(["ps", "-ww", "-eo", "pid,args"], capture_output=True, text=True).stdout
    left += [f"process {line.strip()}" for line in ps.splitlines()
             if state_dir in line or any(n in line for n in names)]
    left += [f"file {p}" for p in (Path(state_dir), cluster_file) if p.exists()]
    return left


@pytest.mark.cluster
@pytest.mark.net_timeout(120)
def test_practice_cluster_up_apart_and_down(tmp_path):
    from agglab.emulation.cluster import practice

    if practice.is_up():
        pytest.skip(f"a practice cluster is already up on this machine ({practice.STATE_DIR})")
    cluster_file = tmp_path / "cluster.yaml"
    marker = f"agglab-test-{uuid.uuid4().hex[:8]}"
    try:
        r = _agglab("cluster", "local", "up", "--servers", "2", "--file", str(cluster_file))
        assert r.returncode == 0, r.stderr
        assert r.stdout.strip() == str(cluster_file)
        cluster = yaml.safe_load(cluster_file.read_text())
        servers = cluster["servers"]
        assert [s["address"] for s in servers] == ["172.31.213.2", "172.31.213.3"]
        for s in servers:
            r = _ssh(cluster, s, "ip -o addr show eth0")
            assert r.returncode == 0, r.stderr
            assert s["address"] in r.stdout                 # each server answers as itself
        # a process and a file on server 1
        one = servers[0]
        r = _ssh(cluster, one, f"(exec -a {marker} sleep 300) >/dev/null 2>&1 & echo $!; "
                               f"echo secret > /tmp/{marker}; echo x > /run/{marker}")
        assert r.returncode == 0, r.stderr
        remote_pid = int(r.stdout.split()[0])
        seen = _ssh(cluster, one, f"pgrep -f ^{marker}; cat /tmp/{marker}")
        assert str(remote_pid) in seen.stdout.split() and "secret" in seen.stdout   # it is there
        assert in_head_pidns(marker) == [], "a server's process runs in the head's PID namespace"
        state = yaml.safe_load((practice.STATE_DIR / "state.json").read_text())
        init = state["pids"]["1"]["init"]
        server_ns = os.readlink(f"/proc/{init}/ns/pid")
        ps = subprocess.run(["ps", "-ww", "-eo", "pid=,args="], capture_output=True, text=True).stdout
        mine = [int(line.split()[0]) for line in ps.splitlines() if line.split()[1:2] == [marker]]
        assert len(mine) == 1 and os.readlink(f"/proc/{mine[0]}/ns/pid") == server_ns   # in server 1's
        assert mine[0] != remote_pid                       # and numbered there, not as the head numbers it
        assert not Path(f"/tmp/{marker}").exists() and not Path(f"/run/{marker}").exists(), \
            "a server's /tmp or /run is the head's"
        other = _ssh(cluster, servers[1], f"pgrep -f ^{marker}; ls /tmp/{marker}")
        assert other.returncode != 0 and not other.stdout.strip(), "servers see each other's processes or files"
        links = _ssh(cluster, one, "ls /sys/class/net").stdout.split()
        assert sorted(links) == ["eth0", "lo"], links      # /sys shows only the server's interfaces
    finally:
        r = _agglab("cluster", "local", "down")
    assert r.returncode == 0, r.stderr
    assert _leftovers([marker, "sshd_config"], str(practice.STATE_DIR), cluster_file) == []
    again = _agglab("cluster", "local", "down")               # idempotent
    assert again.returncode == 0 and again.stderr == ""


@pytest.mark.cluster
def test_cluster_local_up_refuses_bad_counts():
    r = _agglab("cluster", "local", "up", "--servers", "0")
    assert r.returncode == 2
    assert r.stderr.strip().splitlines() == ["agglab cluster local up: --servers must be 1..16, got 0"]


def test_cluster_file_is_checked(tmp_path):
    from agglab.ground.cluster_file import ClusterFileError, load

    good = tmp_path / "good.yaml"
    good.write_text("- {address: 192.0.2.10}\n- {address: 192.0.2.11, user: me, cores: 8, name: b}\n")
    c = load(good)
    assert [(s.name, s.address, s.user, s.cores) for s in c.servers] == [
        ("server1", "192.0.2.10", "root", None), ("b", "192.0.2.11", "me", 8)]
    for text, words in [("servers: []\n", "non-empty list"), ("- {address: host.example}\n", "not an IPv4"),
                        ("- {address: 192.0.2.1, cores: 0}\n", "positive integer"),
                        ("- {address: 192.0.2.1}\n- {address: 192.0.2.1}\n", "unique"),
                        ("- {address: 192.0.2.1, port: 22}\n", "unknown keys")]:
        bad = tmp_path / "bad.yaml"
        bad.write_text(text)
        with pytest.raises(ClusterFileError, match=words):
            load(bad)


def test_thrift_address_is_configurable():
    """A BMv2 switch on another server is reached at that server's address, not 127.0.0.1."""
    import socket

    from agglab.controller.bmv2_ways import _wait_for_port
    from agglab.controller.switch_client import SwitchCommandError

    with socket.socket() as listener:
        listener.bind(("127.0.0.2", 0))
        listener.listen()
        port = listener.getsockname()[1]
        _wait_for_port("s", port, 2, "127.0.0.2")
        with pytest.raises(SwitchCommandError, match="no Thrift server"):
            _wait_for_port("s", port, 0.3)          # nothing listens on 127.0.0.1:port


def test_a_checkout_under_tmp_is_bind_mounted_past_the_servers_private_tmp():
    """The servers' /tmp and /run are private tmpfs: a checkout there must be carried over."""
    from pathlib import Path

    from agglab.emulation.cluster.practice import server_init

    hidden = server_init(Path("/s/sshd_config"), Path("/s/code"), Path("/tmp/my checkout"))
    lines = hidden.splitlines()
    assert lines.index("mount --bind '/tmp/my checkout' '/s/code'") < lines.index(
        "mount -t tmpfs -o mode=1777 agglab-tmp /tmp") < lines.index("mount --bind '/s/code' '/tmp/my checkout'")
    visible = server_init(Path("/s/sshd_config"), Path("/s/code"), Path("/work/agglab"))
    assert "--bind" not in visible and "exec /usr/sbin/sshd -D -e -f /s/sshd_config" in visible
