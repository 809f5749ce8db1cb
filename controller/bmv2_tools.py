"""Where BMv2's programs are: simple_switch, simple_switch_CLI, p4c.

Why a rule of its own: two simple_switch builds may be installed side by side (the reference
build, whose logs say what each packet did, and the performance build of
scripts/build-bmv2.sh --perf, which logs nothing per packet and runs faster); which one runs
must be a choice (AGGLAB_SIMPLE_SWITCH), never the accident of a directory listing's order.
"""

from __future__ import annotations

import functools
import glob
import os
import shutil
import subprocess
import sys

SIMPLE_SWITCH_ENV = "AGGLAB_SIMPLE_SWITCH"
OPT_BINS = "/opt/*/bin"          # where prefixes outside PATH are looked for
# Where scripts/build-bmv2.sh puts the performance build beside the kit (`make bench ONLY=bmv2`
# measures it there); BUILD_PERF is the command that builds it.
PERF_SWITCH = "/opt/bmv2-perf/bin/simple_switch"
BUILD_PERF = ("sudo scripts/build-bmv2.sh --perf --switch-only "
              "[--src ../shared/p4kit/behavioral-model-1.15.5-src.tar.xz] /opt/bmv2-perf")


def find_bmv2_tool(name: str) -> str | None:
    """simple_switch / simple_switch_CLI / p4c: PATH, else under /opt/*/bin.

    One rule picks simple_switch, so that a second build installed beside the first (e.g. the
    performance build of scripts/build-bmv2.sh --switch-only in /opt/bmv2-perf, whose logs
    have no per-packet lines) is never run by accident: AGGLAB_SIMPLE_SWITCH=PATH if set,
    else the one found the way simple_switch_CLI is: on PATH, else in an /opt/*/bin that holds
    simple_switch_CLI too (a full BMv2 install, whose Thrift Python bindings agglab uses)."""
    if name == "simple_switch" and os.environ.get(SIMPLE_SWITCH_ENV):
        chosen = os.environ[SIMPLE_SWITCH_ENV]
        if not is_program(chosen):
            raise FileNotFoundError(f"{SIMPLE_SWITCH_ENV}={chosen}: no such executable")
        return chosen
    return installed_tool(name)


def is_program(path: str) -> bool:
    return os.path.isfile(path) and os.access(path, os.X_OK)


def installed_tool(name: str) -> str | None:
    """The tool of the full BMv2 install (PATH, else /opt/*/bin holding simple_switch_CLI), whatever
    AGGLAB_SIMPLE_SWITCH says: the reference build beside a switch-only one."""
    found = shutil.which(name)
    if found:
        return found
    hits = sorted(glob.glob(f"{OPT_BINS}/{name}"))
    if name in ("simple_switch", "simple_switch_CLI"):
        hits = [h for h in hits if os.path.exists(os.path.join(os.path.dirname(h), "simple_switch_CLI"))]
    return hits[0] if hits else None


def simple_switch_note() -> str:
    """What a simple_switch log reader should know about the binary that wrote it: its path and,
    when AGGLAB_SIMPLE_SWITCH chose it, that a performance build logs no per-packet lines."""
    binary = find_bmv2_tool("simple_switch")
    if os.environ.get(SIMPLE_SWITCH_ENV):
        return (f"simple_switch {binary} (from {SIMPLE_SWITCH_ENV}; if it was built with "
                f"--disable-logging-macros, e.g. scripts/build-bmv2.sh --perf, its log has no per-packet "
                f"lines whatever -L says: unset {SIMPLE_SWITCH_ENV} for the reference build's)")
    return f"simple_switch {binary}"


@functools.cache
def cli_python() -> str:
    """The interpreter to run simple_switch_CLI with. It is `#!/usr/bin/env python3` and needs
    `thrift`, which a pyenv or venv python3 first on PATH often lacks (then the script dies on
    its first import, and every batch of the simple_switch_CLI way with it): the first
    interpreter that has it."""
    for candidate in ("/usr/bin/python3", shutil.which("python3"), sys.executable):
        if candidate and subprocess.run([candidate, "-c", "import thrift"], capture_output=True).returncode == 0:
            return candidate
    return "python3"
