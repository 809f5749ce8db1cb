"""`agglab doctor`: what is installed, what is missing, and what that means for the user."""

from __future__ import annotations

import importlib
import os
import shutil
import sys


def _check(label: str, ok: bool, why: str) -> bool:
    print(f"  [{'ok' if ok else '--'}] {label}" + ("" if ok else f": {why}"))
    return ok


def _importable(name: str) -> bool:
    try:
        importlib.import_module(name)
        return True
    except Exception:
        return False


def report() -> int:
    from controller.switch_client import find_bmv2_tool

    print(f"agglab doctor (python {sys.executable})")
    essential = [
        _check("running as root", os.geteuid() == 0, "Mininet needs root: use sudo"),
        _check("mininet python package", _importable("mininet.net"),
               "apt-get install mininet, and use a venv made from /usr/bin/python3 with --system-site-packages"),
        _check("mnexec", shutil.which("mnexec") is not None, "apt-get install mininet"),
        _check("numpy/networkx/scapy/yaml", all(map(_importable, ["numpy", "networkx", "scapy", "yaml"])),
               "make setup"),
        _check("software switch", _importable("softswitch.pipeline"), "repository incomplete?"),
    ]
    print("optional (real BMv2 backend):")
    _check("p4c", find_bmv2_tool("p4c") is not None, "not installed: --backend bmv2 unavailable (the VM has it)")
    _check("simple_switch", find_bmv2_tool("simple_switch") is not None, "not installed: --backend bmv2 unavailable")
    _check("tc htb rate limiting", shutil.which("tc") is not None, "apt-get install iproute2")
    return 0 if all(essential) else 1
