"""`agglab clean --all` never surprises: it lists the live runs it would stop, asks on a
terminal (or takes --yes), refuses in one line with neither, and returns only once the
processes of the runs it stopped are gone.

Each test works in a scratch run root (AGGLAB_RUN_ROOT) holding a "live run": its owner and
a process it recorded are children of this test, blocked reading a pipe (so they live until
signalled, and `Popen.poll()` right after clean returns says whether they were gone by then:
no sleep, no clock). A clean that goes ahead runs in a network namespace of its own
(`unshare -n`): `--all` also deletes interfaces no run records, and the machine's are not
this test's to delete.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from agglab.ground.rundir import secure_dir

REPO = Path(__file__).resolve().parent.parent

# A process that blocks until signalled; with IGNORE it ignores SIGTERM (only SIGKILL ends it).
BLOCK = """
import signal, sys
if sys.argv[1:] == ["IGNORE"]:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
print("ready", flush=True)
sys.stdin.read()
"""


def _blocked(*args: str) -> subprocess.Popen:
    p = subprocess.Popen([sys.executable, "-c", BLOCK, *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         text=True)
    assert p.stdout.readline().strip() == "ready"        # its SIGTERM disposition is set
    return p


@pytest.fixture
def live_run(tmp_path):
    """A scratch run root with one live run: (root, run dir, owner, recorded process)."""
    root = secure_dir(tmp_path / "runs")
    run = root / "net-20260101-000000-abcdef"
    run.mkdir(mode=0o700)
    owner, child = _blocked(), _blocked("IGNORE")
    (run / "owner.pid").write_text(str(owner.pid))
    (run / "pids").write_text(f"{child.pid} simple_switch s1\n")
    yield root, run, owner, child
    for p in (owner, child):
        if p.poll() is None:
            p.kill()
        p.wait()


def _clean(root: Path, *args: str, netns: bool = False) -> subprocess.CompletedProcess:
    env = {**os.environ, "AGGLAB_RUN_ROOT": str(root), "PYTHONPATH": str(REPO)}
    cmd = [sys.executable, "-m", "agglab", "clean", *args]
    return subprocess.run((["unshare", "-n"] if netns else []) + cmd, cwd=REPO, env=env, stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=120)


def test_without_a_terminal_or_yes_it_refuses_in_one_line_and_stops_nothing(live_run):
    root, run, owner, child = live_run
    res = _clean(root, "--all")
    assert res.returncode == 2, res.stdout + res.stderr
    assert res.stderr.count("\n") == 1 and "Traceback" not in res.stderr, res.stderr
    assert res.stderr.startswith("agglab clean --all: would stop 1 live run(s) (net-20260101-000000-abcdef: "
                                 f"owner pid {owner.pid} ("), res.stderr
    assert "give --yes" in res.stderr and res.stdout == ""
    assert owner.poll() is None and child.poll() is None and run.is_dir()


def test_plain_clean_still_leaves_a_live_run_alone_without_asking(live_run):
    root, run, owner, child = live_run
    res = _clean(root)
    assert res.returncode == 0 and "1 live run(s) left alone" in res.stdout, res.stdout + res.stderr
    assert owner.poll() is None and child.poll() is None and run.is_dir()


@pytest.mark.root
def test_yes_stops_the_run_and_returns_once_its_processes_are_gone(live_run):
    root, run, owner, child = live_run
    res = _clean(root, "--all", "--yes", netns=True)
    assert res.returncode == 0, res.stdout + res.stderr
    # gone by the time clean returned: the owner by SIGTERM (its own clean-up would run), the
    # recorded process, which ignores SIGTERM, by the SIGKILL after the grace period
    assert owner.poll() == -signal.SIGTERM and child.poll() == -signal.SIGKILL
    assert not run.exists()
    assert "removed 1 run(s), stopped 2 process(es)" in res.stdout, res.stdout


@pytest.mark.root
def test_no_live_run_needs_no_answer(tmp_path):
    root = secure_dir(tmp_path / "runs")
    dead = root / "net-dead"
    dead.mkdir()
    (dead / "owner.pid").write_text("999999999")
    res = _clean(root, "--all", netns=True)
    assert res.returncode == 0 and "removed 1 run(s)" in res.stdout, res.stdout + res.stderr
    assert not dead.exists()


@pytest.mark.root
@pytest.mark.parametrize("answer", ["n", "y"])
def test_on_a_terminal_it_lists_the_runs_and_asks(live_run, answer):
    import pexpect

    root, run, owner, child = live_run
    env = {**os.environ, "AGGLAB_RUN_ROOT": str(root), "PYTHONPATH": str(REPO)}
    term = pexpect.spawn("unshare", ["-n", sys.executable, "-m", "agglab", "clean", "--all"], cwd=str(REPO), env=env,
                         encoding="utf-8", timeout=120)
    term.expect_exact("agglab clean --all would stop 1 live run(s), and their networks:")
    term.expect_exact(f"net-20260101-000000-abcdef: owner pid {owner.pid} (`")
    term.expect_exact("1 process(es) it started")
    term.expect_exact("stop them? [y/N] ")
    assert owner.poll() is None                          # nothing is stopped before the answer
    term.sendline(answer)
    term.expect(pexpect.EOF)
    term.close()
    if answer == "n":
        assert term.exitstatus == 1 and "nothing stopped" in term.before
        assert owner.poll() is None and child.poll() is None and run.is_dir()
    else:
        assert term.exitstatus == 0 and "removed 1 run(s), stopped 2 process(es)" in term.before, term.before
        assert owner.poll() == -signal.SIGTERM and child.poll() == -signal.SIGKILL and not run.exists()


def test_a_run_not_in_the_agreed_list_is_left_alone(live_run, monkeypatch):
    """What the person agreed to is what stops: a run that started after the listing (here:
    one not in `stop`) is left alone even with everything=True."""
    from agglab.ground import cleanup

    root, run, owner, child = live_run
    monkeypatch.setattr(cleanup, "RUN_ROOT", root)
    done = cleanup.clean(everything=True, verbose=False, stop=set())
    assert done["runs"] == 0 and owner.poll() is None and child.poll() is None and run.is_dir()
