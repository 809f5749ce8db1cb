"""At the end of a test session, say every switch the liveness probe declared hung, and what
its process was doing then.

Why: on a loaded machine the probe must never fence a live switch (a false hang ends a run
with a failure that is not there). A test that expects a hang SIGSTOPs the switch, so its
declared hang is "stopped"; any other state ("running", "sleeping") is a live switch declared
hung, or a wedged one, and worth reading even when every test passed. The emulator appends
each declared hang to $AGGLAB_HANG_AUDIT (emulation/switch_failures.audit_hang), child
processes included; this plugin points it at a file of the session's unless the caller named
one (a run beside busy loops keeps its own), and prints the tally.
"""

from __future__ import annotations

import os
import tempfile
from collections import Counter
from pathlib import Path

from agglab.emulation.switch_failures import HANG_AUDIT, read_hang_audit


def tally(rows: list[dict]) -> list[str]:
    """The summary's lines: one total, then one line per hang of a switch that was not stopped."""
    states = Counter(r["state"] or "unknown" for r in rows)
    live = [r for r in rows if r["state"] != "stopped"]
    head = (f"{len(rows)} declared hung: {states.get('stopped', 0)} stopped on purpose (SIGSTOP), "
            f"{len(live)} not stopped")
    return [head] + [f"  {r['switch']} was {r['state'] or 'unknown'} (run {r['run']})" for r in live]


class HangAudit:
    def __init__(self, path: Path):
        self.path = path

    def pytest_terminal_summary(self, terminalreporter):
        lines = tally(read_hang_audit(self.path))
        terminalreporter.section("liveness probe", red=len(lines) > 1)
        for line in lines:
            terminalreporter.write_line(line)
        terminalreporter.write_line(f"(each hang: {self.path})")


def install(config) -> None:
    """Register the audit once (tests/conftest.py calls this)."""
    if config.pluginmanager.has_plugin("agglab-hang-audit"):
        return
    if not os.environ.get(HANG_AUDIT):
        os.environ[HANG_AUDIT] = str(Path(tempfile.mkdtemp(prefix="agglab-hangs-")) / "hangs.jsonl")
    config.pluginmanager.register(HangAudit(Path(os.environ[HANG_AUDIT])), "agglab-hang-audit")
