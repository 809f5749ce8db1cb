"""Tenant jobs and hostile frames through Mininet and the software switch.

Each run is checked against numpy by the session (per job: its own seed, so no two jobs sum
the same arrays); these tests assert every job's exactness, that the lossy job really lost
packets, that it did not hold the others back, and, with the fuzzer, that every hostile frame
was counted by the reason it was built to fail.
"""

from __future__ import annotations

import pytest

from agglab.emulation.session import run_spec
from agglab.ground.runspec import RunSpec
from tests.leftovers import assert_clean

pytestmark = [pytest.mark.root, pytest.mark.mininet, pytest.mark.slow]


def _check_jobs(r: dict, jobs: int, lossy: int) -> None:
    assert r["exact"], r.get("errors")
    assert len(r["jobs"]) == jobs and all(j["exact"] for j in r["jobs"]), r["jobs"]
    ranges = sorted((j["slot_base"], j["slot_base"] + j["slots"]) for j in r["jobs"])
    assert all(a[1] <= b[0] for a, b in zip(ranges, ranges[1:])), ranges           # disjoint
    assert len({h for j in r["jobs"] for h in j["hosts"]}) == jobs * r["workers"]    # hosts of their own
    assert r["jobs"][lossy]["loss"] == 0.1
    assert r["jobs"][lossy]["retransmissions"] > 0          # the loss was really applied to that job
    assert r["switch"]["sim_dropped"] > 0
    # not stalled by the lossy job: every other job ran loss-free and finished exact (checked
    # above) within its give-up; no wall-clock comparison (CI is a loaded 2-core machine)
    assert all(j["loss"] == 0 for i, j in enumerate(r["jobs"]) if i != lossy), r["jobs"]
    assert r["switch"]["rejected"] == 0                      # tenants never trip each other's guards


@pytest.mark.net_timeout(300)
def test_two_tenant_jobs_on_a_fat_tree_exact_with_one_at_10_percent_loss():
    spec = RunSpec(topology="fattree", k=4, workers=4, jobs=2, job_loss=[0.1, 0.0], elements=40_000, seed=3)
    r = run_spec(spec)
    _check_jobs(r, 2, lossy=0)
    assert [j["job"] for j in r["jobs"]] == [0, 1]
    assert_clean()


@pytest.mark.net_timeout(300)
def test_four_tenant_jobs_on_one_switch_exact_with_one_at_10_percent_loss():
    spec = RunSpec(workers=2, jobs=4, job=10, job_loss=[0.0, 0.0, 0.1, 0.0], elements=40_000, seed=5)
    r = run_spec(spec)
    _check_jobs(r, 4, lossy=2)
    assert [j["job"] for j in r["jobs"]] == [10, 11, 12, 13]
    assert [j["slots"] for j in r["jobs"]] == [256] * 4
    assert_clean()


@pytest.mark.net_timeout(420)
def test_fuzzing_a_switch_while_a_job_runs_keeps_it_exact_and_counts_every_reject():
    from agglab.emulation.fuzzing import run

    r = run(frames=20_000, rate=4_000, workers=3, elements=60_000, baseline=1, seed=7, police=False)
    assert r["switch_alive"]
    assert r["alone"]["exact"] and r["during"]["exact"], r["errors"]
    assert r["fuzzer"]["sent"] == 20_000 and r["fuzzer"]["send_errors"] == 0
    assert r["fuzz_port_rx"] >= 20_000                       # every frame reached the switch ...
    assert r["rejects"] == r["expected_rejects"], (r["rejects"], r["expected_rejects"])   # ... and was counted
    assert sum(r["rejects"].values()) == 20_000
    assert {"rejected_malformed", "rejected_length", "rejected_no_entry"} <= set(r["rejects"])
    assert_clean()


def _rerouted_both(f: dict) -> None:
    """One failure, both jobs rerouted around it (their own epochs), none partitioned."""
    assert f["on_tree"] and not f["partitioned"], f
    assert sorted(j["job"] for j in f["jobs"]) == [0, 1], f
    assert all(j["epoch"] == 1 and j["recovered_ms"] >= j["detect_ms"] >= 0 for j in f["jobs"]), f


@pytest.mark.net_timeout(300)
@pytest.mark.parametrize("option", ["fail", "fail_switch"])
def test_one_failure_reroutes_both_tenant_jobs_each_exact(option):
    """`--jobs 2 --fail tree@0.5` / `--fail-switch tree@0.5`: the link or switch is picked on both
    jobs' trees; one failure event makes both reroute, and both sums are exact."""
    spec = RunSpec(topology="fattree", k=4, workers=4, jobs=2, elements=40_000, seed=4, **{option: ["tree@0.5"]})
    r = run_spec(spec)
    assert r["exact"] and all(j["exact"] for j in r["jobs"]), (r.get("errors"), r["jobs"])
    (f,) = r["failures"]
    _rerouted_both(f)
    if option == "fail_switch":
        assert f["switch"] in r["switches_down"]
    kinds = [line.split()[1] for line in r["events"]]
    assert kinds.count("rerouted") == 2
    assert_clean()


@pytest.mark.net_timeout(300)
def test_the_labs_kill_and_restart_with_two_jobs_keep_both_exact():
    """The lab's `kill`/`restart` with jobs (Session.kill_switch, restart_switch): both jobs
    reroute around the dead switch and take it back, and every allreduce is exact."""
    from agglab.emulation.session import Session

    spec = RunSpec(topology="fattree", k=4, workers=4, jobs=2, elements=20_000, seed=6)
    with Session(spec) as s:
        sw = s.group.pick_tree_switch(0)
        s.kill_switch(sw)
        assert [j.trees().epoch for j in s.jobs] == [1, 1]
        r = s.allreduce()
        assert r["exact"] and all(j["exact"] for j in r["jobs"]), r.get("errors")
        s.restart_switch(sw)
        assert [j.trees().epoch for j in s.jobs] == [2, 2] and sw in s.group.live_switches()
        assert s.allreduce()["exact"]
    assert_clean()


@pytest.mark.net_timeout(420)
def test_a_flood_from_a_host_in_no_job_is_policed_and_every_frame_counted():
    """100,000 frames, unpaced, from a host in no job at a switch while a job runs: its port is
    policed (controller/policer.py), so most frames are dropped at the meter and counted as
    `policed`, the rest by the reason they were built for, every frame the port took counted
    once, and every allreduce stays exact. The job's rate under the flood over its rate alone
    (measured in the same run) is printed here and judged in `make bench` (policer section):
    on this shared 2-core machine it swings with the load, so it is not asserted."""
    from agglab.emulation.fuzzing import run

    r = run(frames=100_000, workers=4, elements=200_000, bw=20.0, baseline=2, seed=3)
    assert r["switch_alive"]
    assert r["alone"]["exact"] and r["during"]["exact"], r["errors"]
    assert r["fuzzer"]["sent"] == 100_000
    assert r["rejects_match"], (r["rejects"], r["expected_rejects"], r["fuzz_port_rx"])
    assert sum(r["rejects"].values()) == r["fuzz_port_rx"] > 0
    # the meter lets POLICE_BURST through at once and POLICE_PPS a second after: a flood of
    # 100,000 frames in well under a second is nearly all policed
    assert r["policed"] >= 0.9 * r["fuzz_port_rx"], r["rejects"]
    print(f"job rate under the flood / alone: {r['during_vs_alone']}")
    assert_clean()
