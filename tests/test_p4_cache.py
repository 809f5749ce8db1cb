"""A copy of p4src/ byte for byte (an exercise's overlay holding the solution) is not compiled
again: agglab/testkit/bmv2_target.py takes the project's cached build for it; a copy with one
byte changed is compiled from the copy. No p4c needed: a p4c that does not exist fails the
test if it is called."""

from __future__ import annotations

import shutil

import agglab.testkit.bmv2_target as bt
from agglab.emulation.p4build import sources_digest
from agglab.ground.paths import P4SRC
from agglab.softswitch.schemes import write_p4


def _copy(tmp_path):
    write_p4(P4SRC / "include")
    src = tmp_path / "p4src"
    shutil.copytree(P4SRC, src)
    return src


def test_a_byte_for_byte_copy_uses_the_projects_build(tmp_path, monkeypatch):
    src = _copy(tmp_path)
    assert sources_digest(src) == sources_digest()
    monkeypatch.setattr(bt, "P4SRC", src)
    monkeypatch.setattr(bt, "cached", lambda: tmp_path / "the-projects-build.json")
    assert bt.compile_p4("/nonexistent/p4c", tmp_path / "out") == tmp_path / "the-projects-build.json"


def test_a_changed_copy_is_compiled_from_the_copy(tmp_path, monkeypatch):
    src = _copy(tmp_path)
    program = src / "agglab.p4"
    program.write_text(program.read_text() + "\n// a student's change\n")
    assert sources_digest(src) != sources_digest()
    monkeypatch.setattr(bt, "P4SRC", src)
    monkeypatch.setattr(bt, "cached", lambda: tmp_path / "the-projects-build.json")
    calls = []
    monkeypatch.setattr(bt.subprocess, "run", lambda cmd, **kw: calls.append(cmd) or
                        type("Done", (), {"returncode": 1, "stdout": "", "stderr": "no p4c here"})())
    try:
        bt.compile_p4("/nonexistent/p4c", tmp_path / "out")
    except RuntimeError as exc:
        assert "p4c failed" in str(exc)
    else:
        raise AssertionError("a changed copy was not compiled")
    assert len(calls) == 1 and calls[0][0] == "/nonexistent/p4c" and str(src / "agglab.p4") in calls[0]
