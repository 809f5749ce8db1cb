"""Stopping `agglab exercise check` while its checker has BMv2 up (a kill, a closed terminal)
removes the checker's switch and namespace, as a stopped `agglab allreduce` does.

Why: the checker is a second interpreter (agglab/exercise_runner.py) that starts simple_switch in
a namespace of its own for the P4 checks. The command used to end it with SIGKILL on a stop
(subprocess.run's way), and a checker killed there left its namespace and switch behind; a
test pass killed half-way showed it (an agglab-run namespace made by the checker's pid, removed
only by `agglab clean`).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from agglab import exercise
from agglab.ground.netnames import owner_of
from agglab.ground.paths import REPO
from agglab.testkit.waits import wait_until
from tests.leftovers import _ancestors, leftovers, named_namespaces, new_leftovers

pytestmark = [pytest.mark.root, pytest.mark.bmv2, pytest.mark.net_timeout(600)]


def _under(pid: int) -> tuple[set[str], set[int]]:
    """The namespaces whose maker (the pid in the name, ground/netnames.py) descends from `pid`,
    and the simple_switch processes that do."""
    spaces = {n for n in named_namespaces() if (owner := owner_of(n)) and pid in _ancestors(owner)}
    found = subprocess.run(["pgrep", "-x", "simple_switch"], capture_output=True, text=True).stdout.split()
    return spaces, {int(p) for p in found if pid in _ancestors(int(p))}


def test_a_check_stopped_while_bmv2_runs_leaves_no_switch_and_no_namespace(tmp_path):
    ex = next(e for e in exercise.exercises() if e.p4)
    work = tmp_path / "w"
    exercise.start(ex, work, solution=True)
    before = leftovers()
    proc = subprocess.Popen([sys.executable, "-m", "agglab", "exercise", "check", str(ex.number), "--dir", str(work),
                             "--bmv2", "yes"], cwd=tmp_path, env=dict(os.environ, PYTHONPATH=str(REPO)),
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    err: list[str] = []
    reader = threading.Thread(target=lambda: err.extend(proc.stderr), daemon=True)
    reader.start()
    seen: list[tuple[set[str], set[int]]] = []
    try:
        def bmv2_up() -> bool:
            assert proc.poll() is None, f"the check ended before BMv2 ran: {''.join(err)[-2000:]}"
            spaces, switches = _under(proc.pid)
            seen[:] = [(spaces, switches)]
            return bool(spaces and switches)

        wait_until(bmv2_up, 300, "the checker's simple_switch in its namespace")
        proc.send_signal(signal.SIGTERM)                 # the command only, as `kill PID` does
        code = proc.wait(timeout=180)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    reader.join(10)
    stderr = "".join(err)
    assert code == 128 + signal.SIGTERM, stderr[-2000:]
    assert stderr.strip().splitlines()[-1].startswith("agglab exercise: interrupted by SIGTERM"), stderr[-2000:]
    assert "Traceback" not in stderr, stderr[-3000:]
    (spaces, switches), = seen
    assert not spaces & set(named_namespaces()), spaces          # the checker's namespace is gone ...
    assert not [p for p in switches if Path(f"/proc/{p}").exists()], switches     # ... and its switch
    left = new_leftovers(before)
    assert not any(left.values()), left
