"""ground/timerslack.py: the slack a process asks for is what the kernel then reports."""

from __future__ import annotations

import subprocess
import sys

import pytest

from agglab.ground import timerslack


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="prctl is Linux's")
def test_set_timer_slack_is_seen_by_the_kernel_and_inherited():
    """In a fresh interpreter (the test's own threads keep theirs): the default (50,000 ns
    on stock kernels, whatever this one says) becomes 1 ns, which /proc reports and a child
    process inherits."""
    code = ("import subprocess; from agglab.ground import timerslack as t; before = t.timer_slack(); "
            "ok = t.set_timer_slack(1); "
            "child = subprocess.run(['cat', '/proc/self/timerslack_ns'], capture_output=True, text=True).stdout; "
            "print(before, ok, t.timer_slack(), open('/proc/self/timerslack_ns').read().strip(), child.strip())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    before, ok, after, proc, child = out
    assert int(before) >= 1 and ok == "True"
    assert (after, proc, child) == ("1", "1", "1")


def test_wakeup_latency_reports_percentiles_in_order():
    r = timerslack.wakeup_latency(samples=20, wait_s=50e-6)
    assert r["samples"] == 20 and r["wait_us"] == 50.0
    assert r["median_us"] <= r["p90_us"] <= r["p99_us"] <= r["max_us"]
