"""`--backend bmv2` end to end: BMv2 simple_switch running the compiled agglab.p4 in Mininet.

Why every scenario runs `agglab` in a child process: a BMv2 run that hangs (the reason this
file exists, see docs/design/failures.md "Link failures on BMv2") must fail the test, not the CI run. The child
gets its own process group and a deadline; on timeout it is killed, its run directory's switch
logs are attached to the failure, and `agglab clean` removes what it left.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest

from agglab.ground import wire
from agglab.ground.paths import REPO, RUN_ROOT
from agglab.ground.cleanup import clean
from tests.leftovers import assert_clean

pytestmark = [pytest.mark.root, pytest.mark.mininet, pytest.mark.bmv2]


def _switch_logs(since: float, limit: int = 40) -> str:
    """The last lines of every switch log of the runs started after `since`."""
    parts = []
    for run in sorted(RUN_ROOT.glob("*")) if RUN_ROOT.exists() else []:
        if run.stat().st_mtime < since:
            continue
        for log in sorted(run.glob("*.log")) + sorted(run.glob("*.out")):
            lines = log.read_text(errors="replace").splitlines()[-limit:]
            parts.append(f"--- {log}\n" + "\n".join(lines))
    return "\n".join(parts) or "(no switch logs found)"


def agglab(args: list[str], timeout: float, stdin: str | None = None) -> subprocess.CompletedProcess:
    """Run `python -m agglab ARGS` with a hard deadline; a hang fails with the switch logs."""
    started = time.time()
    proc = subprocess.Popen([sys.executable, "-m", "agglab", *args], cwd=REPO, text=True,
                            stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    try:
        out, err = proc.communicate(stdin, timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            out, err = proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, err = proc.communicate()
        logs = _switch_logs(started)
        clean(verbose=False)
        pytest.fail(f"agglab {' '.join(args)} did not finish in {timeout:.0f} s\nstdout:\n{out[-3000:]}\n"
                    f"stderr:\n{err[-3000:]}\nswitch logs:\n{logs}")
    if proc.returncode not in (0, 1):
        logs = _switch_logs(started)
        pytest.fail(f"agglab {' '.join(args)} exited {proc.returncode}\n{err[-3000:]}\nswitch logs:\n{logs}")
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def allreduce(*args: str, timeout: float) -> dict:
    proc = agglab(["allreduce", "--backend", "bmv2", "--json", *args], timeout)
    lines = proc.stdout.strip().splitlines()
    assert lines, f"agglab {' '.join(args)} printed no result (exit {proc.returncode})\n{proc.stderr[-3000:]}"
    result = json.loads(lines[-1])
    assert_clean()
    assert result.get("ok") and result.get("exact"), \
        f"not exact: {json.dumps(result)[:3000]}\nstderr:\n{proc.stderr[-3000:]}"
    return result


SPARSE = ("--algorithm", "omnireduce", "--density", "0.2")


@pytest.mark.parametrize("algorithm", [(), SPARSE], ids=["dense", "sparse"])
def test_one_switch_exact(algorithm):
    r = allreduce("--workers", "4", "--elements", str(wire.K * 64 + 17), "--seed", "3", *algorithm, timeout=180)
    assert r["ok"] and r["exact"], r
    assert r["backend"] == "bmv2" and r["max_abs_error"] == 0


def test_fat_tree_exact_without_failure():
    r = allreduce("--topology", "fattree", "--k", "4", "--workers", "8", "--tree", "rat",
                  "--elements", "20000", timeout=300)
    assert r["ok"] and r["exact"], r
    assert r["failures"] == []


@pytest.mark.parametrize("algorithm", [(), SPARSE], ids=["dense", "sparse"])
def test_fat_tree_exact_with_a_tree_link_failing(algorithm):
    r = allreduce("--topology", "fattree", "--k", "4", "--workers", "8", "--tree", "rat",
                  "--elements", "20000", "--fail", "tree@0.5", *algorithm, timeout=300)
    assert r["ok"] and r["exact"], r
    [failure] = r["failures"]
    assert failure["on_tree"] and failure["install_ms"] is not None, failure


def test_lab_script_on_bmv2(tmp_path):
    script = tmp_path / "lab.txt"
    script.write_text("trees\nallreduce 20000\nwait\nfail a1 c1\nallreduce 20000\nwait\nstats\nevents\n")
    proc = agglab(["lab", "--backend", "bmv2", "--topology", "fattree", "--k", "4", "--workers", "8",
                   "--script", str(script)], timeout=400)
    assert proc.stdout.count("allreduce: exact") == 2, proc.stdout + proc.stderr
    assert re.search(r"link (a1-c1|c1-a1) went down", proc.stdout), proc.stdout   # events, in words
    assert_clean()


def test_fat_tree_reroute_step_by_step_through_simple_switch_cli(monkeypatch):
    """The third way in (simple_switch_CLI, no BMv2 Python modules in the controller) has no
    pipelined batches, so a failure reroutes through controller/reroute/steps.py: freeze,
    drain, snapshot, new trees, reset, install, preload, one step after the other. Its first
    run on BMv2: a tree link fails half-way, and the sum is still exact."""
    from agglab.controller.bmv2_ways import API_ENV

    monkeypatch.setenv(API_ENV, "simple_switch_CLI")
    r = allreduce("--topology", "fattree", "--k", "4", "--workers", "8", "--tree", "rat",
                  "--elements", "20000", "--fail", "tree@0.5", timeout=300)
    assert r["ok"] and r["exact"], r
    [failure] = r["failures"]
    assert failure["on_tree"] and failure["install_ms"] is not None, failure
    assert "snapshot_ms" in failure and "first_round_ms" not in failure, failure   # the step path's phases
