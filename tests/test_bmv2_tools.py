"""Which simple_switch agglab runs (controller/bmv2_tools.py): AGGLAB_SIMPLE_SWITCH if set, else
the one beside simple_switch_CLI; a switch-only build in /opt is never picked by itself."""

from __future__ import annotations

import pytest

from agglab.controller import bmv2_tools


def _exe(path):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n")
    path.chmod(0o755)
    return str(path)


@pytest.fixture
def opt(tmp_path, monkeypatch):
    """A fake /opt: a full install under kit/ and a switch-only build under a-perf/ (sorted first)."""
    monkeypatch.setattr(bmv2_tools, "OPT_BINS", f"{tmp_path}/*/bin")
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.delenv(bmv2_tools.SIMPLE_SWITCH_ENV, raising=False)
    full = {n: _exe(tmp_path / "kit" / "bin" / n) for n in ("simple_switch", "simple_switch_CLI", "p4c")}
    perf = _exe(tmp_path / "a-perf" / "bin" / "simple_switch")
    return full, perf


def test_without_the_variable_the_full_install_is_run(opt):
    full, _perf = opt
    assert bmv2_tools.find_bmv2_tool("simple_switch") == full["simple_switch"]
    assert bmv2_tools.find_bmv2_tool("simple_switch_CLI") == full["simple_switch_CLI"]
    assert "AGGLAB_SIMPLE_SWITCH" not in bmv2_tools.simple_switch_note()


def test_the_variable_chooses_simple_switch_only(opt, monkeypatch):
    full, perf = opt
    monkeypatch.setenv(bmv2_tools.SIMPLE_SWITCH_ENV, perf)
    assert bmv2_tools.find_bmv2_tool("simple_switch") == perf
    assert bmv2_tools.find_bmv2_tool("simple_switch_CLI") == full["simple_switch_CLI"]   # bindings stay the kit's
    assert bmv2_tools.find_bmv2_tool("p4c") == full["p4c"]
    note = bmv2_tools.simple_switch_note()
    assert perf in note and "per-packet" in note


def test_a_variable_naming_no_program_is_an_error(opt, monkeypatch, tmp_path):
    monkeypatch.setenv(bmv2_tools.SIMPLE_SWITCH_ENV, str(tmp_path / "nowhere" / "simple_switch"))
    with pytest.raises(FileNotFoundError, match="AGGLAB_SIMPLE_SWITCH"):
        bmv2_tools.find_bmv2_tool("simple_switch")


def test_path_comes_before_opt(opt, monkeypatch, tmp_path):
    on_path = _exe(tmp_path / "usr" / "bin" / "simple_switch")
    monkeypatch.setenv("PATH", str(tmp_path / "usr" / "bin"))
    assert bmv2_tools.find_bmv2_tool("simple_switch") == on_path
