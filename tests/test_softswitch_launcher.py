"""softswitch/launcher.py: switches forked from one imported process behave as processes of
their own (answer, exit codes, signals, logs), and the launcher leaves nothing behind.

Switches here have no ports, so no root is needed: each serves its control socket only.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time

import pytest

from agglab.ground.paths import REPO
from agglab.softswitch.control import wait_ready
from agglab.softswitch.launcher import Launcher


@pytest.fixture
def launcher(tmp_path):
    launcher = Launcher(tmp_path / "launcher.out", cwd=REPO)
    started = []
    launcher.started = started
    yield launcher
    for proc in started:
        proc.kill()
        proc.wait(10)
    launcher.close()
    assert launcher.proc.returncode == 0


def _switch(launcher, tmp_path, name: str, *extra: str):
    argv = ["--name", name, "--control", str(tmp_path / f"{name}.sock"), "--log", str(tmp_path / f"{name}.log"),
            *extra]
    proc = launcher.spawn(argv, tmp_path / f"{name}.out")
    launcher.started.append(proc)
    return proc


def test_forked_switches_answer_and_report_their_own_exit(launcher, tmp_path):
    a, b, c = (_switch(launcher, tmp_path, name) for name in ("s1", "s2", "s3"))
    assert len({a.pid, b.pid, c.pid, launcher.pid, os.getpid()}) == 5
    for name, proc in (("s1", a), ("s2", b), ("s3", c)):
        client = wait_ready(tmp_path / f"{name}.sock", 20, process=proc)
        assert client.command("ping") == "pong"
        assert client.peer_pid() == proc.pid                  # the socket is served by that very process
        client.close()
        assert proc.poll() is None
        assert open(f"/proc/{proc.pid}/comm").read().strip() == f"softswitch:{name}"
        assert os.getsid(proc.pid) == proc.pid                  # its own session, as start_new_session
    with pytest.raises(subprocess.TimeoutExpired, match="timed out after 0.2 seconds"):
        a.wait(timeout=0.2)
    b.kill()
    assert b.wait(timeout=60) == -signal.SIGKILL
    a.terminate()                                              # the daemon's own shutdown: exit 0
    assert a.wait(timeout=60) == 0
    assert "received SIGTERM" in (tmp_path / "s1.log").read_text()
    assert c.poll() is None                                    # the others' exits are not its own
    b.kill()                                                   # signalling an exited switch is a no-op
    assert b.poll() == -signal.SIGKILL


def test_a_refused_command_line_exits_2_with_argparse_message(launcher, tmp_path):
    proc = launcher.spawn(["--name", "bad"], tmp_path / "bad.out")
    assert proc.wait(timeout=60) == 2
    assert "the following arguments are required: --control" in (tmp_path / "bad.out").read_text()


def test_switches_die_with_their_launcher_and_it_exits_when_closed(tmp_path):
    """A switch must not outlive the network that started it (an interrupted run would leave it
    serving): the launcher's forks die with the launcher, which exits cleanly when closed."""
    launcher = Launcher(tmp_path / "launcher.out", cwd=REPO)
    proc = launcher.spawn(["--name", "s9", "--control", str(tmp_path / "s9.sock")], tmp_path / "s9.out")
    try:
        wait_ready(tmp_path / "s9.sock", 20, process=proc).close()
        assert proc.poll() is None                             # serving while its launcher lives
        launcher.close()
        assert launcher.proc.returncode == 0
        assert proc.wait(timeout=60) is not None               # gone with the launcher
    finally:
        if proc.poll() is None:
            proc.kill()
    with pytest.raises(RuntimeError, match="launcher has exited"):
        launcher.spawn(["--name", "late"], tmp_path / "late.out")
