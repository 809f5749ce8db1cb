"""A declared hang records what the switch's process was doing (emulation/switch_probe.process_state)
and lands in $AGGLAB_HANG_AUDIT (emulation/switch_failures.audit_hang), which tests/hang_audit.py
tallies at the end of a session."""

from __future__ import annotations

import json
import os
import signal
import subprocess

import pytest

from agglab.emulation.switch_failures import HANG_AUDIT, audit_hang, read_hang_audit
from agglab.emulation.switch_probe import process_state
from agglab.testkit.waits import wait_until
from tests.hang_audit import tally


@pytest.fixture
def child():
    proc = subprocess.Popen(["sleep", "600"])
    yield proc
    proc.kill()
    proc.wait()


def test_a_sleeping_process_then_a_stopped_one(child):
    assert wait_until(lambda: process_state(child.pid) == "sleeping", what="sleep to be asleep")
    os.kill(child.pid, signal.SIGSTOP)
    assert wait_until(lambda: process_state(child.pid) == "stopped", what="the SIGSTOP to land")


def test_a_process_that_is_gone_has_no_state(child):
    child.kill()
    child.wait()
    assert process_state(child.pid) is None
    assert process_state(None) is None


def test_a_declared_hang_is_appended_to_the_audit_file(tmp_path, monkeypatch):
    path = tmp_path / "hangs.jsonl"
    monkeypatch.setenv(HANG_AUDIT, str(path))
    audit_hang("e3", "stopped", tmp_path / "run1")
    audit_hang("a2", "sleeping", None)
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert [(r["switch"], r["state"], r["run"]) for r in rows] == [("e3", "stopped", str(tmp_path / "run1")),
                                                                     ("a2", "sleeping", None)]


def test_without_the_variable_nothing_is_written(tmp_path, monkeypatch):
    monkeypatch.delenv(HANG_AUDIT, raising=False)
    monkeypatch.chdir(tmp_path)
    audit_hang("e3", "stopped", None)
    assert list(tmp_path.iterdir()) == []


def test_the_tally_names_every_switch_that_was_not_stopped(tmp_path):
    path = tmp_path / "hangs.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in [
        {"switch": "e1", "state": "stopped", "run": "r1"},
        {"switch": "e6", "state": "running", "run": "r2"},
        {"switch": "c1", "state": "stopped", "run": "r3"}]) + "\n")
    assert tally(read_hang_audit(path)) == ["3 declared hung: 2 stopped on purpose (SIGSTOP), 1 not stopped",
                                            "  e6 was running (run r2)"]
    assert tally(read_hang_audit(tmp_path / "none.jsonl")) == ["0 declared hung: 0 stopped on purpose (SIGSTOP), 0 not stopped"]
