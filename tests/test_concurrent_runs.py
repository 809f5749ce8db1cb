"""Two runs on one machine never damage each other; run directories no other user can plant.

A network holds the machine's lease (ground/netlease.py) while it exists: a second run
refuses in one line naming the first (pid, command, run directory) before it creates
anything, and the first network keeps every interface and stays exact. The run root is
checked (owner, mode, symlink) before use, and `agglab clean` never follows a symlink.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from agglab.ground import netlease, rundir
from agglab.ground.rundir import UnsafeRunDir, secure_dir

REPO = Path(__file__).resolve().parent.parent


def refusing_env() -> dict:
    """This environment for an agglab child, without AGGLAB_NET_WAIT: these tests check that
    a second run refuses, which a caller's queueing setting would turn into a wait."""
    return {**{k: v for k, v in os.environ.items() if k != "AGGLAB_NET_WAIT"}, "PYTHONPATH": str(REPO)}


# -- run directories ------------------------------------------------------------------------
def test_secure_dir_creates_a_private_directory(tmp_path):
    d = secure_dir(tmp_path / "runs")
    assert d.is_dir() and (d.stat().st_mode & 0o777) == 0o700
    assert secure_dir(d) == d                       # the second use accepts what the first made


def test_secure_dir_refuses_a_symlink(tmp_path):
    real = tmp_path / "elsewhere"
    real.mkdir(mode=0o700)
    (tmp_path / "runs").symlink_to(real)
    with pytest.raises(UnsafeRunDir, match="symlink"):
        secure_dir(tmp_path / "runs")


def test_secure_dir_refuses_a_group_or_world_writable_directory(tmp_path):
    d = tmp_path / "runs"
    d.mkdir()
    for mode in (0o777, 0o1777, 0o770):
        os.chmod(d, mode)
        with pytest.raises(UnsafeRunDir, match="writable"):
            secure_dir(d)


def test_secure_dir_refuses_a_file(tmp_path):
    (tmp_path / "runs").write_text("planted")
    with pytest.raises(UnsafeRunDir, match="not a directory"):
        secure_dir(tmp_path / "runs")


@pytest.mark.root
def test_secure_dir_refuses_another_users_directory(tmp_path):
    d = tmp_path / "runs"
    d.mkdir(mode=0o700)
    os.chown(d, 65534, 65534)                        # nobody planted it first
    with pytest.raises(UnsafeRunDir, match="uid 65534"):
        secure_dir(d)


def _clean_in(root: Path, *args: str) -> subprocess.CompletedProcess:
    env = dict(refusing_env(), AGGLAB_RUN_ROOT=str(root))
    return subprocess.run([sys.executable, "-m", "agglab", "clean", *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=60)


def test_clean_never_follows_a_symlink(tmp_path):
    root = secure_dir(tmp_path / "runs")
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "precious").write_text("keep me")
    (root / "net-planted").symlink_to(victim)                 # a run directory that is a link
    dead = root / "net-dead"                                   # a crashed run's directory ...
    dead.mkdir()
    (dead / "owner.pid").write_text("999999999")
    (dead / "inside").symlink_to(victim)                       # ... holding a link out of the root
    res = _clean_in(root)
    assert res.returncode == 0, res.stderr
    assert (victim / "precious").read_text() == "keep me"
    assert not dead.exists()


def test_clean_refuses_an_unsafe_run_root_in_one_line(tmp_path):
    root = tmp_path / "runs"
    root.mkdir()
    os.chmod(root, 0o777)
    res = _clean_in(root)
    assert res.returncode == 1
    assert res.stderr.strip().count("\n") == 0 and "world-writable" in res.stderr, res.stderr
    assert "Traceback" not in res.stderr


def test_clean_leaves_a_live_run_alone(tmp_path):
    root = secure_dir(tmp_path / "runs")
    live = root / "net-live"
    live.mkdir()
    (live / "owner.pid").write_text(str(os.getpid()))          # this test is its owner: alive
    res = _clean_in(root)
    assert res.returncode == 0 and live.is_dir(), res.stdout + res.stderr
    assert "1 live run(s) left alone" in res.stdout


# -- the network lease ----------------------------------------------------------------------
HOLD = """
import sys, time
from agglab.ground import netlease
netlease.acquire("/somewhere/net-x", path=sys.argv[1])
print("held", flush=True)
time.sleep(60)
"""


def test_a_second_process_is_refused_naming_the_holder(tmp_path):
    lease = secure_dir(tmp_path / "lease") / "network.lock"
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(lease)], cwd=REPO, stdout=subprocess.PIPE, text=True,
                              env=refusing_env())
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(netlease.NetworkBusy, match=f"another network is running on this machine: pid {holder.pid} ") as busy:
            netlease.acquire(tmp_path, path=lease, wait=0)
        line = str(busy.value)
        assert f"pid {holder.pid}" in line and "/somewhere/net-x" in line and "\n" not in line
        assert netlease.holder_elsewhere(lease).startswith(f"pid {holder.pid}")
    finally:
        holder.kill()
        holder.wait()
    netlease.acquire(tmp_path, path=lease, wait=5)             # the lease died with its holder
    try:
        netlease.acquire(tmp_path, path=lease)                 # counted within one process
        netlease.release()
        assert netlease.holder_elsewhere(lease) is None
    finally:
        netlease.release()


# -- two networks at once -------------------------------------------------------------------
def _our_interfaces(group: int) -> set[str]:
    return {p.name for p in Path("/sys/class/net").iterdir() if rundir.group_of(p.name) == group}


@pytest.mark.root
@pytest.mark.mininet
@pytest.mark.net_timeout(240)
def test_a_second_run_beside_an_open_network_refuses_and_harms_nothing():
    from agglab.emulation.session import Session
    from agglab.ground.runspec import RunSpec

    spec = RunSpec(topology="fattree", k=4, workers=4, elements=20000, seed=3)
    with Session(spec) as session:
        group = session.net.run.recorded_link_group()
        before = _our_interfaces(group)
        g = session.g
        assert before == {e["intfs"][n] for u, v, e in g.edges(data=True) for n in (u, v)
                          if g.nodes[n]["kind"] == "switch"}         # every switch end, each in the run's group
        second = subprocess.run([sys.executable, "-m", "agglab", "allreduce", "--topology", "fattree", "--k", "4",
                                 "--workers", "2", "--elements", "1000"], cwd=REPO, capture_output=True, text=True,
                                env=refusing_env(), timeout=120)
        assert second.returncode == netlease.NetworkBusy.exit_code, second.stdout + second.stderr
        lines = second.stderr.strip().splitlines()
        assert len(lines) == 1 and f"pid {os.getpid()}" in lines[0] and str(session.net.run.path) in lines[0], lines
        assert "Traceback" not in second.stderr + second.stdout
        assert _our_interfaces(group) == before
        assert not [e for e in session.events.lines() if "link_down" in e]
        result = session.allreduce()
        assert result["exact"] and result["ok"], result.get("errors")
        assert _our_interfaces(group) == before


@pytest.mark.root
@pytest.mark.mininet          # holds the machine's real lease: with the network tests, in turn
def test_batch_commands_refuse_once_while_another_network_holds_the_machine(tmp_path):
    from agglab.ground.paths import NET_LEASE

    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(NET_LEASE)], cwd=REPO, stdout=subprocess.PIPE,
                              text=True, env=refusing_env())
    try:
        assert holder.stdout.readline().strip() == "held"
        definition = tmp_path / "one.yaml"
        definition.write_text('{"name": "one", "network": {"link": "100Gbps", "gradient": "100MB"}, '
                              '"emulated": {"gradient": "1MiB"}, "run": {"topology": "single"}, "repeats": 1, '
                              '"series": {"in-network": {"algorithm": "switchml"}}, "sweep": {"workers": [2]}}')
        env = refusing_env()
        for argv in (["-m", "agglab", "experiment", str(definition), "--out", str(tmp_path / "results")],
                     ["-m", "agglab.bench", "--only", "build"],
                     ["-m", "agglab", "lab", "--topology", "single", "--script", os.devnull],
                     ["-m", "agglab", "train", "--model", "mlp", "--workers", "2", "--steps", "2",
                      "--out", str(tmp_path / "train")]):
            res = subprocess.run([sys.executable, *argv], cwd=REPO, env=env, capture_output=True, text=True,
                                 timeout=120)
            lines = (res.stdout + res.stderr).strip().splitlines()
            assert res.returncode == netlease.NetworkBusy.exit_code, (argv, lines)
            assert len(lines) == 1 and f"pid {holder.pid}" in lines[0], (argv, lines)
        assert not (tmp_path / "results").exists() or not any((tmp_path / "results").rglob("runs.jsonl"))
    finally:
        holder.kill()
        holder.wait()
