"""ground/priority.py: the scheduling class of the programs that run in the emulated hosts."""

from __future__ import annotations

import os
import subprocess
import sys

from agglab.ground.paths import REPO


def test_a_worker_process_runs_as_batch_work_and_its_threads_inherit_it():
    code = ("import os, threading; from agglab.ground.priority import as_batch_work; "
            "assert os.sched_getscheduler(0) == os.SCHED_OTHER; ok = as_batch_work(); seen = []; "
            "t = threading.Thread(target=lambda: seen.append(os.sched_getscheduler(0))); t.start(); t.join(); "
            "print(ok, os.sched_getscheduler(0) == os.SCHED_BATCH, seen == [os.SCHED_BATCH])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         env=dict(os.environ, PYTHONPATH=str(REPO)), check=True).stdout.split()
    assert out == ["True", "True", "True"]
