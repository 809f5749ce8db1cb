"""Shared pytest set-up: environment markers skip with a reason when the thing is absent.

- root:    needs root (namespaces, raw sockets)
- mininet: needs Debian's Mininet (python package + mnexec)
- bmv2:    needs BMv2 simple_switch and p4c (on PATH or under /opt/*/bin)
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))


def _have_mininet() -> bool:
    return importlib.util.find_spec("mininet") is not None and shutil.which("mnexec") is not None


def _have_bmv2() -> bool:
    from controller.switch_client import find_bmv2_tool

    return bool(find_bmv2_tool("simple_switch") and find_bmv2_tool("p4c"))


def pytest_collection_modifyitems(config, items):
    reasons = {
        "root": None if os.geteuid() == 0 else "needs root (network namespaces, raw sockets)",
        "mininet": None if _have_mininet() else "needs Mininet (apt-get install mininet; Debian's python3)",
        "bmv2": None if _have_bmv2() else "needs BMv2 simple_switch and p4c (the Vagrant VM has them)",
    }
    for item in items:
        for marker, reason in reasons.items():
            if reason and item.get_closest_marker(marker):
                item.add_marker(pytest.mark.skip(reason=reason))
