"""Children die with their parent (ground/lifeline.py): kill -9 of an agglab run leaves no
software switch, launcher, worker or standby process running."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from agglab.testkit.waits import wait_until
from agglab.ground import lifeline
from tests.leftovers import new_leftovers, leftovers

REPO = Path(__file__).resolve().parent.parent


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def _gone_within(pids: set[int], seconds: float) -> set[int]:
    """The pids still alive after waiting up to `seconds` for them to go."""
    with contextlib.suppress(AssertionError):
        wait_until(lambda: not any(_alive(p) for p in pids), seconds, "the processes to go")
    return {p for p in pids if _alive(p)}


def _descendants(root: int) -> set[int]:
    children: dict[int, list[int]] = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                ppid = int(next(line for line in (d / "status").read_text().splitlines()
                                if line.startswith("PPid:")).split()[1])
            except (OSError, StopIteration, ValueError):
                continue
            children.setdefault(ppid, []).append(int(d.name))
    out, todo = set(), [root]
    while todo:
        for c in children.get(todo.pop(), []):
            out.add(c)
            todo.append(c)
    return out


PARENT = """
import subprocess, sys, time
from agglab.ground import lifeline
child = subprocess.Popen(["sleep", "300"], preexec_fn=lifeline.preexec(), start_new_session=True)
print(child.pid, flush=True)
time.sleep(300)
"""


def test_a_child_dies_with_its_killed_parent():
    parent = subprocess.Popen([sys.executable, "-c", PARENT], cwd=REPO, stdout=subprocess.PIPE, text=True,
                              env=dict(os.environ, PYTHONPATH=str(REPO)))
    child = int(parent.stdout.readline())
    assert _alive(child)
    parent.kill()
    parent.wait()
    assert not _gone_within({child}, 20), "the child outlived its parent"


def test_without_the_main_thread_a_child_that_may_outlive_its_thread_gets_no_death_signal():
    got = {}
    t = threading.Thread(target=lambda: got.update(free=lifeline.preexec(), bound=lifeline.preexec(bound_to_thread=True)))
    t.start()
    t.join()
    assert got["free"] is None and callable(got["bound"])
    assert callable(lifeline.preexec())


@pytest.mark.root
@pytest.mark.mininet
@pytest.mark.net_timeout(180)
def test_kill_9_of_a_run_leaves_no_switch_or_worker_running(tmp_path):
    root = tmp_path / "runs"
    env = dict(os.environ, AGGLAB_RUN_ROOT=str(root), PYTHONPATH=str(REPO))
    before = leftovers()
    proc = subprocess.Popen([sys.executable, "-m", "agglab", "allreduce", "--topology", "fattree", "--k", "4",
                             "--workers", "4", "--elements", "2000000", "--bw", "10"],
                            cwd=REPO, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        def started():
            assert proc.poll() is None, "the run ended before its allreduce started"
            return any(_progress(f) > 0 for f in root.glob("*/*/rank*.progress"))

        wait_until(started, 120, "the run to start its allreduce")
        tree = _descendants(proc.pid)
        recorded = {int(line.split()[0]) for f in root.glob("*/pids") for line in _text(f).splitlines()
                    if line.strip() and "shell" not in line}
        assert len(recorded) >= 20 + 1 + 4                 # switches, the launcher, the workers
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        left = _gone_within(tree | recorded, 30)
        assert not left, {p: Path(f"/proc/{p}/cmdline").read_bytes()[:120] for p in left if _alive(p)}
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        subprocess.run([sys.executable, "-m", "agglab", "clean"], cwd=REPO, env=env, capture_output=True, timeout=120)
    assert not any(new_leftovers(before).values())


def _text(f: Path) -> str:
    """A file's text, or "" if it went between the glob and the read (a run directory being
    made is renamed from its `.making-` name when it is complete)."""
    try:
        return f.read_text()
    except FileNotFoundError:
        return ""


def _progress(f: Path) -> int:
    try:
        return int(f.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 0
