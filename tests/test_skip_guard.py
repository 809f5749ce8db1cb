"""The CI skip guard (tests/skip_guard.py): an unexpected skip fails a CI run, an allowed one
does not, and outside CI a skip is only a skip."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

SKIPPING = '''
import pytest

def test_runs():
    assert 1 + 1 == 2

@pytest.mark.skip(reason="BMv2 is not installed")
def test_needs_bmv2():
    pass
'''


def _pytest(tmp_path: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    (tmp_path / "test_sample.py").write_text(SKIPPING)
    base = {k: v for k, v in os.environ.items() if k not in ("CI", "AGGLAB_NO_SKIPS", "AGGLAB_SKIP_ALLOW")}
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "tests.skip_guard", "-p", "no:cacheprovider",
                           "--rootdir", str(tmp_path), "-c", os.devnull, str(tmp_path / "test_sample.py")],
                          cwd=REPO, env={**base, "PYTHONPATH": str(REPO), **env}, capture_output=True, text=True,
                          timeout=120)


def test_an_unexpected_skip_fails_a_ci_run(tmp_path):
    proc = _pytest(tmp_path, {"CI": "true"})
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "1 passed, 1 skipped" in proc.stdout
    assert "test_sample.py::test_needs_bmv2: BMv2 is not installed" in proc.stdout


def test_a_skip_on_the_allow_list_passes(tmp_path):
    allow = tmp_path / "allow.txt"
    allow.write_text("*::test_needs_bmv2   # this sample has no BMv2\n")
    proc = _pytest(tmp_path, {"CI": "true", "AGGLAB_SKIP_ALLOW": str(allow)})
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_an_allowed_pattern_needs_a_reason(tmp_path):
    allow = tmp_path / "allow.txt"
    allow.write_text("*::test_needs_bmv2\n")
    proc = _pytest(tmp_path, {"CI": "true", "AGGLAB_SKIP_ALLOW": str(allow)})
    assert proc.returncode == 4, proc.stdout + proc.stderr          # pytest's usage error
    assert "has no reason" in proc.stderr


def test_outside_ci_a_skip_is_only_a_skip(tmp_path):
    proc = _pytest(tmp_path, {})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "1 passed, 1 skipped" in proc.stdout


def test_the_allow_list_parses_and_gives_reasons():
    from tests.skip_guard import ALLOW_FILE, read_allow_list

    for pattern in read_allow_list(ALLOW_FILE):
        assert "::" in pattern or pattern.endswith(".py"), pattern
