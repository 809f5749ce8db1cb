"""emulation/bmv2_ports.py's wait for a switch's receive thread asleep in select() (the moment a
BMv2 port change cannot deadlock), seen on real processes: a thread asleep in select() is seen,
one that computes or sleeps otherwise is not."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from agglab.testkit.waits import wait_until

from agglab.emulation import bmv2_ports

pytestmark = pytest.mark.skipif(os.uname().machine not in bmv2_ports.SELECT_SYSCALLS,
                                reason="select()'s syscall numbers are known for x86-64 and arm64 only")

SELECTS = "import select, sys; print('ready', flush=True); select.select([sys.stdin], [], [], 60)"
SPINS = "import sys; print('ready', flush=True)\nwhile True: pass"
SLEEPS = "import sys, time; print('ready', flush=True); time.sleep(60)"


def _child(code: str) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready"
    return proc


def _stop(proc: subprocess.Popen) -> None:
    proc.kill()
    proc.wait()


def test_a_thread_asleep_in_select_is_seen():
    proc = _child(SELECTS)
    try:
        assert bmv2_ports.wait_receive_asleep(proc.pid, limit=30)
    finally:
        _stop(proc)


@pytest.mark.parametrize("code", [SPINS, SLEEPS], ids=["computing", "asleep elsewhere"])
def test_a_process_not_in_select_is_not_asleep_in_it(code):
    proc = _child(code)
    try:
        wait_until(lambda: open(f"/proc/{proc.pid}/stat").read().rsplit(")", 1)[1].split()[0] in ("R", "S"),
                   what="the child in its loop or sleep")
        assert bmv2_ports.receive_thread_asleep(proc.pid) is False
        assert bmv2_ports.wait_receive_asleep(proc.pid, limit=0.05) is False
    finally:
        _stop(proc)


def test_a_process_that_is_gone_is_not_waited_for():
    proc = _child(SLEEPS)
    _stop(proc)
    assert bmv2_ports.receive_thread_asleep(proc.pid) is None
    assert bmv2_ports.wait_receive_asleep(proc.pid, limit=30) is False     # at once, not after 30 s
    assert bmv2_ports.wait_receive_asleep(None) is False
