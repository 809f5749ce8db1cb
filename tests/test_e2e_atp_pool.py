"""A scarce pool and jobs that train, through Mininet and the software switch: what the
switches' own registers say after the run (not the code that chose the numbering).

- ATP with --atp-pool-slots P: no aggregator at or above P ever held a value (atp_values
  is written only when (job, seq) claims an aggregator, and prepare() clears only the
  bitmap and count, so every claim of the run is still there), some below P did;
- static SwitchML with the same P and 2 jobs: the slots written (agg_block non-zero: the
  block a round started with) lie below P, job 0's in 0..P/2-1 and job 1's in P/2..P-1,
  so neither job's window exceeded its half;
- jobs that train: every iteration exact, iterations/s per job, the occupancy sampled.
"""

from __future__ import annotations

import numpy as np
import pytest

from agglab.emulation.session import Session
from agglab.ground import wire
from agglab.ground.runspec import RunSpec
from tests.leftovers import assert_clean

pytestmark = [pytest.mark.root, pytest.mark.mininet, pytest.mark.slow]

BASE = dict(topology="fattree", k=4, workers=4, jobs=2, placement="packed", elements=20_000, seed=4)


@pytest.mark.net_timeout(300)
def test_atp_jobs_hold_no_aggregator_outside_a_pool_of_16():
    spec = RunSpec(**BASE, algorithm="atp", window=32, atp_pool_slots=16, atp_ps="separate",
                   atp_multicast=True).validate()
    with Session(spec) as s:
        r = s.allreduce()
        assert r["exact"] and all(j["exact"] for j in r["jobs"]), r.get("errors")
        claimed = set()
        for sw in sorted({sw for job in s.jobs for sw in job.expect}):
            lanes = np.array(s.net.clients[sw].register_read("atp_values")).reshape(-1, wire.K)
            claimed |= set(np.flatnonzero(lanes.any(axis=1)).tolist())
    assert claimed and max(claimed) < 16, sorted(claimed)
    assert r["switch"]["atp_claim"] > 0
    occ = r["pool_occupancy"]
    assert occ["pool"] == 16 and all((h or 0) <= 16 for held in occ["held"].values() for h in held)
    assert_clean()


@pytest.mark.net_timeout(300)
def test_static_jobs_stay_in_their_half_of_a_pool_of_32():
    spec = RunSpec(**BASE, algorithm="switchml", atp_pool_slots=32).validate()
    with Session(spec) as s:
        r = s.allreduce()
        assert r["exact"] and all(j["exact"] for j in r["jobs"]), r.get("errors")
        used = {}
        for sw in sorted(s.net.clients):
            if sw in s.net.dead:
                continue
            blocks = s.net.clients[sw].register_read("agg_block")
            used[sw] = {i % wire.SLOTS for i, b in enumerate(blocks) if b}
    every = set().union(*used.values())
    assert every and max(every) < 32, sorted(every)
    # the switches where each job's tree aggregates: job 0's rounds in 0..15, job 1's in 16..31
    assert any(u and max(u) < 16 for u in used.values()) and any(u and min(u) >= 16 for u in used.values())
    assert [j["window"] for j in r["jobs"]] == [16, 16]
    assert_clean()


@pytest.mark.net_timeout(400)
@pytest.mark.parametrize("algorithm,extra", [("atp", {"window": 32, "atp_ps": "separate", "atp_multicast": True}),
                                             ("switchml", {})])
def test_jobs_that_train_report_iterations_per_second(algorithm, extra):
    spec = RunSpec(**BASE, algorithm=algorithm, atp_pool_slots=32, iterations=3, compute_ms=30.0,
                   job_offsets=[0.1], **extra).validate()
    with Session(spec) as s:
        r = s.allreduce()
    assert r["exact"], r.get("errors")
    for i, j in enumerate(r["jobs"]):
        assert j["exact"] and j["iterations"] == 3 and j["iterations_per_s"] > 0, j
        assert j["compute_ms"] == 30.0 and j["offset_s"] == pytest.approx(0.1 * i)
    occ = r["pool_occupancy"]
    assert occ["t"] and occ["pool"] == 32 and occ["read_errors"] == 0
    assert_clean()
