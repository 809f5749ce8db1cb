"""`agglab doctor`: what is installed, what is missing, and what that means for the user."""

from __future__ import annotations

import importlib
import importlib.metadata
import os
import re
import shutil
import subprocess
import sys

from agglab.controller.bmv2_tools import find_bmv2_tool


def _check(label: str, ok: bool, why: str) -> bool:
    print(f"  [{'ok' if ok else '--'}] {label}" + ("" if ok else f": {why}"))
    return ok


def _importable(name: str) -> bool:
    try:
        importlib.import_module(name)
        return True
    except Exception:
        return False


def tool_version(path: str | None, *args: str) -> str | None:
    """First version-looking word a program prints for `args` (e.g. --version), else None."""
    if not path:
        return None
    try:
        proc = subprocess.run([path, *args], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return None
    match = re.search(r"\d+\.\d+(?:\.\d+)*(?:[-+][\w.]+)?", proc.stdout + proc.stderr)
    return match.group(0) if match else None


def package_version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def bmv2_tools() -> list[tuple[str, str | None, str]]:
    """(label, version or None when absent, what its absence means) for the BMv2 tool chain."""
    from agglab.controller.bmv2_ways import add_bmv2_python_path  # lazy: loads numpy, only bmv2_tools() needs it

    simple_switch = find_bmv2_tool("simple_switch")
    cli = find_bmv2_tool("simple_switch_CLI")
    p4c = find_bmv2_tool("p4c")
    add_bmv2_python_path()
    bm_version = tool_version(simple_switch, "--version")
    runtime = _importable("runtime_CLI") and _importable("sswitch_runtime")
    p4utils = _importable("p4utils.utils.sswitch_thrift_API")
    rows = [
        (f"simple_switch {simple_switch or ''}".rstrip(), bm_version,
         "not installed: --backend bmv2 unavailable (sudo scripts/provision-vm.sh, or the Vagrant VM)"),
        (f"simple_switch_CLI {cli or ''}".rstrip(), (bm_version or "?") if cli and runtime else None,
         "missing, or BMv2's Python runtime (runtime_CLI, bm_runtime) does not import"),
        (f"p4c {p4c or ''}".rstrip(), tool_version(p4c, "--version"),
         "not installed: p4src/ cannot be compiled for BMv2"),
        ("thrift (python)", package_version("thrift") if _importable("thrift") else None,
         "apt-get install python3-thrift: no Thrift control of BMv2"),
        ("p4-utils SimpleSwitchThriftAPI", (package_version("p4utils") or "?") if p4utils else None,
         "not installed: agglab uses BMv2's runtime_CLI module instead (same switch, same commands)"),
    ]
    return rows


def report() -> int:
    print(f"agglab doctor (python {sys.executable})")
    essential = [
        _check("running as root", os.geteuid() == 0, "Mininet needs root: use sudo"),
        _check("mininet python package", _importable("mininet.net"),
               "apt-get install mininet, and use a venv made from /usr/bin/python3 with --system-site-packages"),
        _check("mnexec", shutil.which("mnexec") is not None, "apt-get install mininet"),
        _check("numpy/networkx/scapy/yaml", all(map(_importable, ["numpy", "networkx", "scapy", "yaml"])),
               "make setup"),
        _check("software switch", _importable("agglab.softswitch.pipeline"), "repository incomplete?"),
    ]
    print("optional (real BMv2 backend):")
    for label, version, why in bmv2_tools():
        _check(f"{label} ({version})" if version else label, version is not None, why)
    _check("tc htb rate limiting", shutil.which("tc") is not None, "apt-get install iproute2")
    return 0 if all(essential) else 1
