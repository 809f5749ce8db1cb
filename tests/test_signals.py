"""SIGINT, SIGTERM and SIGHUP at set-up, mid-run and during a reroute stop `agglab allreduce`
cleanly: one line saying what was interrupted, exit 128+signal, nothing left behind."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.leftovers import leftovers

REPO = Path(__file__).resolve().parent.parent
pytestmark = [pytest.mark.root, pytest.mark.mininet, pytest.mark.net_timeout(180)]


def _run_dirs(root: Path) -> list[Path]:
    return [d for d in root.glob("*") if d.is_dir()]


def _progress_started(root: Path) -> bool:
    for f in root.glob("*/run*/rank*.progress"):
        try:
            if int(f.read_text().split()[0]) > 0:
                return True
        except (OSError, ValueError, IndexError):
            pass
    return False


MOMENTS = {
    # moment -> (extra argv, predicate on (run root, stderr so far))
    "set-up": ([], lambda root, err: bool(_run_dirs(root))),
    "mid-run": ([], lambda root, err: _progress_started(root)),
    "reroute": (["--topology", "fattree", "--k", "4", "--workers", "8", "--tree", "spt", "--fail", "tree@0.3"],
                lambda root, err: "link_down" in err),
}


@pytest.mark.parametrize("moment,signum", [("set-up", signal.SIGTERM), ("mid-run", signal.SIGHUP),
                                           ("reroute", signal.SIGINT), ("mid-run", signal.SIGTERM)])
def test_signal_stops_allreduce_cleanly(moment, signum, tmp_path):
    extra, reached = MOMENTS[moment]
    root = tmp_path / "runs"
    env = dict(os.environ, AGGLAB_RUN_ROOT=str(root), PYTHONPATH=str(REPO))
    argv = [sys.executable, "-m", "agglab", "allreduce", "--elements", "3000000", "--bw", "20", "--seed", "1"]
    proc = subprocess.Popen(argv + (extra or ["--workers", "4"]), cwd=REPO, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    err: list[str] = []
    reader = threading.Thread(target=lambda: err.extend(proc.stderr), daemon=True)
    reader.start()
    deadline = time.monotonic() + 120
    while not reached(root, "".join(err)):
        assert proc.poll() is None, f"finished before the {moment} moment: {''.join(err)[-2000:]}"
        assert time.monotonic() < deadline, f"never reached {moment}: {''.join(err)[-2000:]}"
        time.sleep(0.02)
    proc.send_signal(signum)
    code = proc.wait(timeout=90)
    reader.join(5)
    stderr = "".join(err)
    assert code == 128 + signum, stderr[-2000:]
    last = stderr.strip().splitlines()[-1]
    assert last == (f"agglab allreduce: interrupted by {signal.Signals(signum).name}; "
                    "everything it started was stopped and removed"), stderr[-2000:]
    assert "Traceback" not in stderr
    assert _run_dirs(root) == [], "run directory left behind"
    assert not any(leftovers().values()), leftovers()
