"""ground/priority.py: the scheduling class of the programs that run in the emulated hosts."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from agglab.ground.paths import REPO
from agglab.ground.priority import urgent


def test_a_worker_process_runs_as_batch_work_and_its_threads_inherit_it():
    code = ("import os, threading; from agglab.ground.priority import as_batch_work; "
            "assert os.sched_getscheduler(0) == os.SCHED_OTHER; ok = as_batch_work(); seen = []; "
            "t = threading.Thread(target=lambda: seen.append(os.sched_getscheduler(0))); t.start(); t.join(); "
            "print(ok, os.sched_getscheduler(0) == os.SCHED_BATCH, seen == [os.SCHED_BATCH])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         env=dict(os.environ, PYTHONPATH=str(REPO)), check=True).stdout.split()
    assert out == ["True", "True", "True"]


def _niceness(pid: int) -> tuple[int, int]:
    """(the process's niceness, its autogroup's), as ps and /proc/PID/autogroup give them."""
    with open(f"/proc/{pid}/autogroup") as f:
        group = int(f.read().split()[-1])
    return int(subprocess.run(["ps", "-o", "ni=", "-p", str(pid)], capture_output=True, text=True,
                              check=True).stdout), group


@pytest.mark.root
def test_blocks_that_overlap_without_nesting_leave_a_process_as_they_found_it():
    """A link failure's strike raises a process (to -10) until the job has seen the failure;
    the reroute it starts raises it further (-15) and ends after the strike's block. The
    process stays at -15 while the reroute holds it and is back at 0 after both, its autogroup
    too. Before, each block restored what it saw on entering: 0 after the strike (while the
    reroute still ran), then -10 for good."""
    kid = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE,
                           start_new_session=True)          # an autogroup of its own, as a switch daemon's
    try:
        assert _niceness(kid.pid) == (0, 0)
        strike, reroute = urgent([kid.pid], own=False), urgent([kid.pid], nice=-15, own=False)
        strike.__enter__()
        assert _niceness(kid.pid) == (-10, -10)
        reroute.__enter__()
        assert _niceness(kid.pid) == (-15, -15)
        strike.__exit__(None, None, None)
        assert _niceness(kid.pid) == (-15, -15)                 # the reroute still holds it
        reroute.__exit__(None, None, None)
        assert _niceness(kid.pid) == (0, 0)
        with urgent([kid.pid], own=False):                       # nested blocks, as before
            with urgent([kid.pid], nice=-15, own=False):
                assert _niceness(kid.pid) == (-15, -15)
            assert _niceness(kid.pid) == (-10, -10)
        assert _niceness(kid.pid) == (0, 0)
    finally:
        kid.stdin.close()
        kid.wait(timeout=60)


@pytest.mark.root
def test_an_autogroup_reached_through_two_processes_is_one_hold():
    """Two blocks reach one session's autogroup through different processes of it (a strike
    through the shell, the reroute through a process the shell started): the group stays at
    the reroute's -15 after the strike's block ends, and is back at 0 after both."""
    shell = subprocess.Popen(["sh", "-c", "sleep 600 & echo $!; exec cat"], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True, start_new_session=True)
    sleeper = int(shell.stdout.readline())
    try:
        strike, reroute = urgent([shell.pid], own=False), urgent([sleeper], nice=-15, own=False)
        strike.__enter__()
        reroute.__enter__()
        strike.__exit__(None, None, None)
        assert _niceness(sleeper) == (-15, -15) and _niceness(shell.pid) == (0, -15)
        reroute.__exit__(None, None, None)
        assert _niceness(sleeper) == (0, 0) and _niceness(shell.pid) == (0, 0)
    finally:
        os.kill(sleeper, 15)
        shell.stdin.close()
        shell.wait(timeout=60)
