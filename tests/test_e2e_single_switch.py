"""End to end on one switch in Mininet: real namespaces, the software switch process,
worker processes, the checker. These are the project's first acceptance scenarios: exact sums, loss, clean teardown."""

from __future__ import annotations

import json
import signal
import subprocess
import sys

import pytest

from agglab.testkit.waits import wait_until
from agglab.ground import wire
from agglab.ground.cleanup import clean
from agglab.ground.paths import REPO, RUN_ROOT
from tests.leftovers import assert_clean, leftovers

pytestmark = [pytest.mark.root, pytest.mark.mininet]


def run(**kw):
    from agglab.emulation.session import run_allreduce

    result = run_allreduce(**kw)
    assert_clean()
    return result


@pytest.mark.parametrize("workers", [2, 4, 8])
def test_int32_exact_for_2_4_8_workers(workers):
    r = run(workers=workers, elements=wire.K * 50 + 17, dtype="int32", seed=workers)
    assert r["ok"] and r["exact"], r
    assert r["max_abs_error"] == 0
    assert r["switch"]["completions"] >= 51     # every block completed in the switch


def test_float32_within_stated_bound():
    r = run(workers=4, elements=5000, dtype="float32", seed=3)
    assert r["exact"], r
    assert 0 < r["max_abs_error"] <= r["error_bound"]


def test_loss_is_recovered_exactly_with_retransmissions():
    r = run(workers=4, elements=wire.K * 200, dtype="int32", loss=0.05, seed=5)
    assert r["exact"], r
    assert r["retransmissions"] > 0
    assert r["switch"]["sim_dropped"] > 0
    assert r["switch"]["dup_answered"] + r["switch"]["dup_dropped"] > 0


def test_window_smaller_than_job():
    r = run(workers=3, elements=wire.K * 40 + 1, dtype="int32", window=4, seed=7)
    assert r["exact"], r


def test_mismatched_lengths_give_a_clear_error():
    r = run(workers=3, elements=1000, dtype="int32", length_override={1: 1064}, give_up=5)
    assert not r["ok"] and not r["exact"]
    text = " ".join(r["errors"])
    assert "length" in text.lower(), text
    assert len(r["errors"]) == 3      # every worker is told, not only the odd one


def test_cli_json_keys():
    out = subprocess.run([sys.executable, "-m", "agglab", "allreduce", "--workers", "2", "--elements", "3000",
                          "--json"], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert out.returncode == 0, out.stderr
    r = json.loads(out.stdout)
    for key in ("ok", "exact", "workers", "elements", "seconds", "goodput_mbps", "retransmissions",
                "max_abs_error", "backend"):
        assert key in r
    assert r["exact"] is True and r["backend"] == "soft"
    assert_clean()


def test_killed_run_is_cleaned_by_agglab_clean():
    proc = subprocess.Popen([sys.executable, "-m", "agglab", "allreduce", "--workers", "4",
                             "--elements", "3000000", "--json"], cwd=REPO,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_until(lambda: any(RUN_ROOT.glob("*/run*/rank0.log")) and leftovers()["namespaces"],
               what="the run's workers to start on its network")
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert any(leftovers().values()), "the killed run should have left something to clean"
    subprocess.run([sys.executable, "-m", "agglab", "clean"], check=True, cwd=REPO)

    def cleaned() -> bool:                       # namespace removal finishes asynchronously
        try:
            assert_clean()
        except AssertionError:
            return False
        return True

    wait_until(cleaned, 30, "what agglab clean removed to be gone")
    assert_clean()
    again = clean(verbose=False)                 # idempotent
    assert again == {"runs": 0, "processes": 0, "interfaces": 0, "namespaces": 0}


def test_a_second_start_is_refused_and_the_network_keeps_working():
    from agglab.emulation.session import Session
    from agglab.ground.runspec import RunSpec

    with Session(RunSpec(workers=2, elements=wire.K * 8)) as session:
        with pytest.raises(RuntimeError, match="already started"):
            session.start()
        r = session.allreduce()
        assert r["exact"], r
    assert_clean()
