"""In CI, a skipped test fails the run unless tests/ci_skips.txt says why it may skip.

Why: the environment markers (conftest.py) skip a test with a reason where BMv2, Mininet, a
browser or root is missing. On a user's laptop that is right; in CI it hid, for months, that
BMv2 was never installed and the P4 program never compiled. So with CI=true (as `.ci/run`
runs) or AGGLAB_NO_SKIPS=1, every skip is checked at the end of the session against an
allow-list of node-id patterns (fnmatch), each with its reason; any other skip is named and
the session's exit status becomes 1.

The allow-list is tests/ci_skips.txt (AGGLAB_SKIP_ALLOW names another file): one pattern a
line, `#` starts a comment, and a pattern without a comment on its line is refused (the reason
is the point).
"""

from __future__ import annotations

import fnmatch
import os
from pathlib import Path

import pytest

ALLOW_FILE = Path(__file__).with_name("ci_skips.txt")


def guard_on() -> bool:
    return os.environ.get("CI", "").lower() == "true" or os.environ.get("AGGLAB_NO_SKIPS") == "1"


def read_allow_list(path: Path) -> list[str]:
    """The patterns of `path`; a pattern with no reason beside it is an error."""
    patterns = []
    if not path.exists():
        return patterns
    for number, raw in enumerate(path.read_text().splitlines(), 1):
        pattern, _, why = raw.partition("#")
        pattern = pattern.strip()
        if not pattern:
            continue
        if not why.strip():
            raise pytest.UsageError(f"{path}:{number}: {pattern!r} has no reason (write it after '#')")
        patterns.append(pattern)
    return patterns


class SkipGuard:
    def __init__(self, allow: list[str]):
        self.allow = allow
        self.unexpected: list[tuple[str, str]] = []     # (node id, skip reason)

    def pytest_runtest_logreport(self, report):
        if not report.skipped or hasattr(report, "wasxfail"):
            return
        if any(fnmatch.fnmatchcase(report.nodeid, pattern) for pattern in self.allow):
            return
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        self.unexpected.append((report.nodeid, reason.removeprefix("Skipped: ")))

    def pytest_terminal_summary(self, terminalreporter):
        if not self.unexpected:
            return
        terminalreporter.section("skips not on the CI allow-list (tests/ci_skips.txt)", red=True)
        for nodeid, reason in self.unexpected:
            terminalreporter.write_line(f"{nodeid}: {reason}")

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session, exitstatus):
        if self.unexpected and session.exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED):
            session.exitstatus = pytest.ExitCode.TESTS_FAILED


def install(config) -> None:
    """Register the guard when CI=true or AGGLAB_NO_SKIPS=1 (tests/conftest.py calls this)."""
    if guard_on() and not config.pluginmanager.has_plugin("agglab-skip-guard"):
        path = Path(os.environ.get("AGGLAB_SKIP_ALLOW") or ALLOW_FILE)
        config.pluginmanager.register(SkipGuard(read_allow_list(path)), "agglab-skip-guard")


pytest_configure = install      # as a plugin of its own: `pytest -p tests.skip_guard` (its test)
