"""Two runs on one machine never damage each other; run directories no other user can plant.

Ordinary runs share the machine's CPU lease (ground/netlease.py) and each records the runs it
overlapped with; a run that takes the machine alone (experiment, calibrate, bench) refuses in
one line naming another live run, and every other run refuses while it holds it. (Two networks
side by side: tests/test_side_by_side.py.) The run root is checked (owner, mode, symlink)
before use, and `agglab clean` never follows a symlink.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from agglab.ground import netlease
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


# -- the machine's CPU lease ----------------------------------------------------------------
HOLD = """
import sys
from agglab.ground import netlease
netlease.acquire("/somewhere/net-x", path=sys.argv[1], alone=sys.argv[2] == "alone")
print("held", flush=True)
sys.stdin.read()                  # holds until the test kills it (or closes its stdin)
"""


def _holder(lease: Path, mode: str) -> subprocess.Popen:
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(lease), mode], cwd=REPO, stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True, env=refusing_env())
    assert holder.stdout.readline().strip() == "held"
    return holder


def _stop(holder: subprocess.Popen) -> None:
    holder.kill()
    holder.wait()


def test_a_run_alone_refuses_every_other_naming_itself(tmp_path):
    lease = secure_dir(tmp_path / "lease") / "network.lock"
    holder = _holder(lease, "alone")
    try:
        for alone in (False, True):
            with pytest.raises(netlease.NetworkBusy, match=f"another network is running on this machine: pid {holder.pid} ") as busy:
                netlease.acquire(tmp_path, path=lease, wait=0, alone=alone)
            line = str(busy.value)
            assert "/somewhere/net-x" in line and "\n" not in line
        assert netlease.holder_elsewhere(lease).startswith(f"pid {holder.pid}")
    finally:
        _stop(holder)
    netlease.acquire(tmp_path, path=lease, wait=5, alone=True)     # the lease died with its holder
    try:
        netlease.acquire(tmp_path, path=lease)                    # counted within one process
        netlease.release()
        assert netlease.holder_elsewhere(lease) is None
    finally:
        netlease.release()


def test_ordinary_runs_share_the_machine_and_each_records_the_other(tmp_path):
    lease = secure_dir(tmp_path / "lease") / "network.lock"
    earlier = _holder(lease, "shared")
    try:
        assert netlease.holder_elsewhere(lease) is None            # an ordinary run goes ahead beside it
        netlease.acquire(tmp_path, path=lease, wait=0)
        try:
            later = _holder(lease, "shared")                      # one that starts while we run
            try:
                assert netlease.shared_with() == sorted([earlier.pid, later.pid])
            finally:
                _stop(later)
        finally:
            netlease.release()
        assert netlease.shared_with() == []                       # the next run starts afresh
        assert netlease.holder_elsewhere(lease, alone=True).startswith(f"pid {earlier.pid} ")   # no experiment now
        with pytest.raises(netlease.NetworkBusy, match=f"pid {earlier.pid} "):
            netlease.acquire(tmp_path, path=lease, wait=0, alone=True)
    finally:
        _stop(earlier)
    netlease.acquire(tmp_path, path=lease, wait=0, alone=True)   # killed runs' files are stale, not live
    try:
        assert netlease.shared_with() == []
    finally:
        netlease.release()


@pytest.mark.root
@pytest.mark.mininet          # holds the machine's real lease: with the network tests, in turn
def test_batch_commands_refuse_once_while_another_run_holds_the_machine_alone(tmp_path):
    from agglab.ground.paths import NET_LEASE

    definition = tmp_path / "one.yaml"
    definition.write_text('{"name": "one", "network": {"link": "100Gbps", "gradient": "100MB"}, '
                          '"emulated": {"gradient": "1MiB"}, "run": {"topology": "single"}, "repeats": 1, '
                          '"series": {"in-network": {"algorithm": "switchml"}}, "sweep": {"workers": [2]}}')
    alone = [["-m", "agglab", "experiment", str(definition), "--out", str(tmp_path / "results")],
             ["-m", "agglab.bench", "--only", "build"],
             ["-m", "agglab", "calibrate", "--workers", "2"]]
    ordinary = [["-m", "agglab", "lab", "--topology", "single", "--script", os.devnull],
                ["-m", "agglab", "train", "--model", "mlp", "--workers", "2", "--steps", "2",
                 "--out", str(tmp_path / "train")]]
    for mode, refused in (("alone", alone + ordinary), ("shared", alone)):
        holder = _holder(NET_LEASE, mode)
        try:
            for argv in refused:
                res = subprocess.run([sys.executable, *argv], cwd=REPO, env=refusing_env(), capture_output=True,
                                     text=True, timeout=120)
                lines = (res.stdout + res.stderr).strip().splitlines()
                assert res.returncode == netlease.NetworkBusy.exit_code, (mode, argv, lines)
                assert len(lines) == 1 and f"pid {holder.pid}" in lines[0], (mode, argv, lines)
        finally:
            _stop(holder)
    assert not (tmp_path / "results").exists() or not any((tmp_path / "results").rglob("runs.jsonl"))


@pytest.mark.root
@pytest.mark.mininet
def test_a_run_beside_another_says_it_shared_the_cpu():
    """The fidelity record names the runs that shared the CPU (here: a stand-in holding an
    ordinary lease for the whole run), and says so in its reason."""
    import json

    from agglab.ground.paths import NET_LEASE

    argv = [sys.executable, "-m", "agglab", "allreduce", "--topology", "single", "--workers", "2",
            "--elements", "2000", "--json"]
    holder = _holder(NET_LEASE, "shared")
    try:
        res = subprocess.run(argv, cwd=REPO, env=refusing_env(), capture_output=True, text=True, timeout=180)
    finally:
        _stop(holder)
    assert res.returncode == 0, res.stderr[-2000:]
    fidelity = json.loads(res.stdout)["fidelity"]
    assert fidelity["shared_cpu_with"] == [holder.pid]
    assert f"the CPU was shared with 1 other run(s) (pid {holder.pid})" in fidelity["reason"]
    alone = json.loads(subprocess.run(argv, cwd=REPO, env=refusing_env(), capture_output=True, text=True,
                                      timeout=180, check=True).stdout)["fidelity"]
    assert alone["shared_cpu_with"] == [] and "shared" not in alone["reason"]


# -- a test's wait for a run holding the machine alone (tests/conftest.py) --------------------
HOLD_UNTIL_TOLD = """
import sys
from agglab.ground import netlease
netlease.acquire("/somewhere/net-x", path=sys.argv[1], alone=sys.argv[2] == "alone")
print("held", flush=True)
sys.stdin.readline()
netlease.release()
print("released", flush=True)
sys.stdin.readline()                 # alive on: the waiter must see the release, not an exit
"""


def _told_holder(lease: Path, mode: str) -> subprocess.Popen:
    holder = subprocess.Popen([sys.executable, "-c", HOLD_UNTIL_TOLD, str(lease), mode], cwd=REPO, text=True,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=refusing_env())
    assert holder.stdout.readline().strip() == "held"
    return holder


def _tell(holder: subprocess.Popen) -> str:
    holder.stdin.write("\n")
    holder.stdin.flush()
    return holder.stdout.readline().strip()


def test_the_wait_for_a_run_alone_ends_when_it_releases_and_takes_no_part_in_the_lease(tmp_path):
    lease = secure_dir(tmp_path / "lease") / "network.lock"
    holder = _told_holder(lease, "alone")
    try:
        # held: a short wait gives up naming the holder (a wait that passed anyway would say None)
        assert f"pid {holder.pid} " in (netlease.wait_while_held_alone(lease, limit=0.2) or "None")
        got = []
        waiter = threading.Thread(target=lambda: got.append(netlease.wait_while_held_alone(lease, limit=120)))
        waiter.start()
        assert _tell(holder) == "released"
        waiter.join(120)
        assert not waiter.is_alive() and got == [None], got
        # a look, not a share: no run file of ours, nothing counted, and the lock is free again
        assert sorted(p.name for p in lease.parent.iterdir()) == ["network.lock"]
        assert netlease._held["count"] == 0
        netlease.acquire(tmp_path, path=lease, wait=0, alone=True)
        netlease.release()
    finally:
        holder.stdin.close()
        holder.wait(30)


def test_the_wait_does_not_wait_for_ordinary_runs(tmp_path):
    lease = secure_dir(tmp_path / "lease") / "network.lock"
    holder = _told_holder(lease, "shared")
    try:
        assert netlease.wait_while_held_alone(lease, limit=60) is None
        assert netlease.holder_elsewhere(lease) is None          # the same judgement as a refusal's
        assert (lease.parent / f"{netlease.RUN_FILE}{holder.pid}").read_text().count("shared=") == 0
    finally:
        holder.stdin.close()
        holder.wait(30)


def test_the_wait_is_over_at_once_without_a_lease(tmp_path):
    assert netlease.wait_while_held_alone(tmp_path / "never-made.lock", limit=60) is None
