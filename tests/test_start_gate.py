"""ground/start_gate.py: workers get ready, wait, and all pass when the session opens the gate;
at the end they wait until every worker has its result (or one exited)."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from agglab.ground.paths import REPO
from agglab.ground.start_gate import StartGate, wait_at_end, wait_to_start

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


# A worker at the end gate: start, then (the last one only once told on stdin) say it has its
# result, wait, and leave a marker once it passed.
FINISHER = """
import sys, pathlib
from agglab.ground.start_gate import wait_at_end, wait_to_start
wait_to_start(timeout=60)
if sys.argv[3] == "hold":
    sys.stdin.readline()
waited = wait_at_end(timeout=float(sys.argv[2]))
pathlib.Path(sys.argv[1]).write_text(str(waited))
"""


def _finisher(gate, marker, hold=False):
    env = dict(os.environ, PYTHONPATH=str(REPO), **gate.env)
    return subprocess.Popen([sys.executable, "-c", FINISHER, str(marker), "60", "hold" if hold else "go"],
                            env=env, pass_fds=gate.fds, stdin=subprocess.PIPE)


def _until(cond, limit=60.0):
    """Poll the session's side (each poll waits up to 50 ms for an arrival) until cond()."""
    deadline = time.monotonic() + limit
    while not cond() and time.monotonic() < deadline:
        pass
    return cond()


def test_no_worker_leaves_the_end_gate_before_every_one_has_its_result(tmp_path):
    gate = StartGate()
    markers = [tmp_path / f"w{i}" for i in range(3)]
    procs = [_finisher(gate, m, hold=(i == 2)) for i, m in enumerate(markers)]
    alive = lambda: all(p.poll() is None for p in procs)   # noqa: E731
    try:
        assert gate.open_when_ready(3, alive, timeout=60)
        assert _until(lambda: gate.open_end_when_done(3, alive, timeout=0.05) or gate.finished >= 2)
        assert gate.finished == 2 and not gate.open_end_when_done(3, alive)
        assert [p.poll() for p in procs] == [None] * 3 and not any(m.exists() for m in markers)
        procs[2].stdin.write(b"go\n")
        procs[2].stdin.flush()
        assert _until(lambda: gate.open_end_when_done(3, alive, timeout=0.05))
        assert [p.wait(timeout=60) for p in procs] == [0] * 3
    finally:
        gate.close()
        for p in procs:
            p.kill()
    assert gate.finished == 3 and all(m.exists() for m in markers)


def test_a_worker_that_exits_without_its_result_opens_the_end_gate(tmp_path):
    gate = StartGate()
    done = _finisher(gate, tmp_path / "ok")
    failed = _spawn(gate, tmp_path / "started")            # passes the start, never the end
    both = lambda: done.poll() is None and failed.poll() is None   # noqa: E731
    try:
        assert gate.open_when_ready(2, both, timeout=60)
        assert failed.wait(timeout=60) == 0
        assert _until(lambda: gate.open_end_when_done(2, both, timeout=0.05))
        assert done.wait(timeout=60) == 0
    finally:
        gate.close()
        done.kill()
    assert gate.finished == 1 and (tmp_path / "ok").exists()


def test_the_end_gate_opens_with_the_start_gate_when_the_session_gives_up(tmp_path):
    gate = StartGate()
    proc = _finisher(gate, tmp_path / "ok")
    try:
        assert gate.open_when_ready(1, lambda: proc.poll() is None, timeout=60)
        gate.close()                  # the session stops waiting (deadline, cancel, its own error)
        assert proc.wait(timeout=60) == 0
    finally:
        proc.kill()
    assert (tmp_path / "ok").exists()


def test_without_an_end_gate_a_process_leaves_at_once():
    assert wait_at_end(timeout=60, environ={"PATH": "/bin"}) == 0.0
