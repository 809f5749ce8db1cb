"""ground/start_gate.py: workers get ready, wait, and all pass when the session opens the gate."""

from __future__ import annotations

import os
import subprocess
import sys

from agglab.ground.paths import REPO
from agglab.ground.start_gate import StartGate, wait_to_start

# A worker: its preparation, then the gate, then a marker that it passed.
WORKER = """
import sys, pathlib
from agglab.ground.start_gate import wait_to_start
waited = wait_to_start(timeout=float(sys.argv[2]))
pathlib.Path(sys.argv[1]).write_text(str(waited))
"""


def _spawn(gate, marker, timeout=60.0, code=WORKER):
    env = dict(os.environ, PYTHONPATH=str(REPO), **gate.env)
    return subprocess.Popen([sys.executable, "-c", code, str(marker), str(timeout)], env=env,
                            pass_fds=gate.fds)


def test_no_worker_passes_before_every_one_is_ready(tmp_path):
    gate = StartGate()
    markers = [tmp_path / f"w{i}" for i in range(4)]
    procs = [_spawn(gate, m) for m in markers]
    passed_early = []

    def alive():                      # asked while the session waits for the last ready byte
        passed_early.extend(m for m in markers if m.exists())
        return all(p.poll() is None for p in procs)

    try:
        assert gate.open_when_ready(len(procs), alive, timeout=60)
        assert [p.wait(timeout=60) for p in procs] == [0] * 4
    finally:
        gate.close()
        for p in procs:
            p.kill()
    assert passed_early == []
    assert gate.seen == 4 and all(m.exists() for m in markers)


def test_a_worker_that_dies_before_it_is_ready_opens_the_gate_for_the_others(tmp_path):
    gate = StartGate()
    waiting = _spawn(gate, tmp_path / "ok")
    dead = _spawn(gate, tmp_path / "never", code="raise SystemExit(3)")
    try:
        ready = gate.open_when_ready(2, lambda: waiting.poll() is None and dead.poll() is None, timeout=60)
        assert not ready and gate.seen <= 1
        assert waiting.wait(timeout=60) == 0 and dead.wait(timeout=60) == 3
    finally:
        gate.close()
        waiting.kill()
    assert (tmp_path / "ok").exists() and not (tmp_path / "never").exists()


def test_a_worker_whose_session_is_gone_does_not_wait(tmp_path):
    gate = StartGate()
    proc = _spawn(gate, tmp_path / "ok")
    gate.close()                      # the session died before it counted anyone
    try:
        assert proc.wait(timeout=60) == 0
    finally:
        proc.kill()
    assert (tmp_path / "ok").exists()


def test_without_a_gate_a_process_starts_at_once():
    assert wait_to_start(timeout=60, environ={"PATH": "/bin"}) == 0.0
