"""Host baselines (ring, ps) end to end in Mininet: worker processes in host namespaces,
TCP through the software switches (forwarding only), loss from the switches' drop
simulator, a link failure rerouted by controller/forwarding_job.py, the session's checker.

Timeouts: every worker gives up after `give_up` seconds without progress (every socket
call carries it), the session kills a worker past its deadline, and tests/conftest.py's
per-test alarm (NETWORK_TIMEOUT for root/mininet tests) fails a run that still hangs.
"""

from __future__ import annotations

import pytest

from agglab.emulation.session import run_allreduce
from tests.leftovers import assert_clean

pytestmark = [pytest.mark.root, pytest.mark.mininet, pytest.mark.slow]


@pytest.mark.parametrize("algorithm,dtype", [("ring", "int32"), ("ps", "float32")])
def test_exact_with_5_percent_loss(algorithm, dtype):
    """5% per port and direction: one switch drops ~10% of the segments between two hosts."""
    r = run_allreduce(algorithm=algorithm, workers=8, elements=30_011, dtype=dtype, loss=0.05, seed=5,
                      give_up=20)
    assert r["ok"] and r["exact"], r.get("errors")
    assert r["retransmissions"] > 0 and r["switch"]["sim_dropped"] > 0
    assert r["algorithm"] == algorithm and r["max_abs_error"] <= r["error_bound"]
    assert r["jobs"][0]["connect_seconds"] > 0          # set up before the start gate, reported apart
    assert_clean()


@pytest.mark.parametrize("algorithm,dtype", [("ring", "float32"), ("ps", "int32")])
def test_exact_when_a_link_it_uses_fails_on_a_fat_tree(algorithm, dtype):
    """tree@0.5: a switch-switch link the algorithm's TCP flows cross goes down halfway; the
    controller moves the routes and TCP's retransmissions find the new path. With 1% loss
    per port and direction as well (a cross-pod path has 10 drop points: ~10% per segment)."""
    r = run_allreduce(algorithm=algorithm, topology="fattree", k=4, workers=8, elements=60_000, dtype=dtype,
                      loss=0.01, fail=["tree@0.5"], seed=7, give_up=20)
    assert r["ok"] and r["exact"], r.get("errors")
    (f,) = r["failures"]
    assert f["on_tree"] and f["epoch"] == 1 and 0 < f["at"] < 1, f
    assert f["detect_ms"] is not None and f["install_ms"] > 0
    assert r["epoch"] == 1
    assert_clean()
