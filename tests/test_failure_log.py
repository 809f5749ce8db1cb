"""tests/failure_log.py: a failure reaches $AGGLAB_FAILURE_LOG while the session still runs.

A planted test file in a directory of its own (no conftest of the project's): the first test
fails, the second checks, while the session runs, that the log already holds the first one's
failure with its message; the passing tests are not logged."""

from __future__ import annotations

import os
import subprocess
import sys

from agglab.ground.paths import REPO

PLANTED = '''
import os
from pathlib import Path

def test_fails():
    assert 6 * 7 == 41, "a planted failure"

def test_the_failure_is_logged_before_the_session_ends():
    text = Path(os.environ["AGGLAB_FAILURE_LOG"]).read_text()
    assert "test_planted.py::test_fails (call) failed at" in text and "a planted failure" in text
'''


def test_a_failure_is_written_at_once_and_a_pass_is_not(tmp_path):
    (tmp_path / "test_planted.py").write_text(PLANTED)
    log = tmp_path / "failures.txt"
    env = dict(os.environ, AGGLAB_FAILURE_LOG=str(log), PYTHONPATH=str(REPO))
    res = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "tests.failure_log",
                          "test_planted.py"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert "1 failed, 1 passed" in res.stdout, res.stdout[-2000:] + res.stderr[-2000:]
    text = log.read_text()
    assert text.count("=== ") == 1 and "test_the_failure_is_logged" not in text
    assert "assert 6 * 7 == 41" in text
