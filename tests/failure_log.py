"""Each failure written to $AGGLAB_FAILURE_LOG the moment it happens, not only at the end.

Why: a pass beside busy loops (tools/under_load.py) takes over an hour, and pytest prints a
failure's message only in the summary when the session ends: a pass stopped half-way (to
start again with a fix) said that a test failed, by a letter F, but never why. With the
variable set (tools/under_load.py sets it), every failed phase of a test (set-up, call,
teardown) is appended to that file at once: its id, the phase, the time, and the report.
tests/conftest.py registers this module as a plugin.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

FAILURE_LOG = "AGGLAB_FAILURE_LOG"
TAIL = 8000          # characters of a report kept (its end: the assertion and the captured output)


def pytest_runtest_logreport(report) -> None:
    path = os.environ.get(FAILURE_LOG)
    if not path or not report.failed:
        return
    with Path(path).open("a") as f:
        f.write(f"=== {report.nodeid} ({report.when}) failed at {time.strftime('%H:%M:%S')}\n"
                f"{report.longreprtext[-TAIL:]}\n")


def install(config) -> None:
    """Register once (tests/conftest.py calls this)."""
    import sys

    if not config.pluginmanager.has_plugin("agglab-failure-log"):
        config.pluginmanager.register(sys.modules[__name__], "agglab-failure-log")
