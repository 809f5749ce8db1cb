"""`agglab doctor` reads the versions the BMv2 tools print and says what is missing."""

from __future__ import annotations

import stat

from agglab import doctor


def _program(tmp_path, name: str, output: str):
    path = tmp_path / name
    path.write_text(f"#!/bin/sh\necho '{output}'\n")
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return str(path)


def test_versions_as_the_tools_print_them(tmp_path):
    # what p4c v1.2.4.8 and simple_switch 1.15.5 print for --version
    assert doctor.tool_version(_program(tmp_path, "p4c", "p4c 1.2.4.8 (SHA: 32893b7 BUILD: Release)"),
                               "--version") == "1.2.4.8"
    assert doctor.tool_version(_program(tmp_path, "simple_switch", "1.15.5"), "--version") == "1.15.5"
    assert doctor.tool_version(_program(tmp_path, "odd", "no version here"), "--version") is None
    assert doctor.tool_version(None) is None
    assert doctor.tool_version(str(tmp_path / "absent")) is None


def test_report_lists_every_bmv2_tool(capsys, monkeypatch):
    monkeypatch.setattr(doctor, "package_version", lambda dist: {"thrift": "0.17.0"}.get(dist))
    real_importable = doctor._importable
    monkeypatch.setattr(doctor, "_importable", lambda name: name == "thrift" or real_importable(name))
    doctor.report()
    out = capsys.readouterr().out
    for label in ("simple_switch", "simple_switch_CLI", "p4c", "thrift (python) (0.17.0)", "p4-utils"):
        assert label in out
