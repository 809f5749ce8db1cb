"""Switch failures in Mininet: a switch process killed mid-allreduce (`--fail-switch`, the
lab's `kill`) is a failure of all its links; the controller notices the exit, reroutes
around the switch, and the allreduce is exact while the workers stay connected, or every
agent ends with NetworkPartitionError; a restarted switch is re-programmed and rejoins.

The in-process twin (test_switch_failure_inprocess.py) covers loss on every hop and dead
roots; these runs prove the real pieces (pidfd watcher, ports taken down, netlink, the
daemon restarted on its sockets) work together.
"""

from __future__ import annotations

import random

import pytest

from agglab.testkit.waits import wait_until
from agglab.controller.topology import switches
from agglab.emulation.session import Session, run_allreduce
from agglab.ground import wire
from agglab.ground.runspec import RunSpec, only_edge_switches
from tests.leftovers import assert_clean

pytestmark = [pytest.mark.root, pytest.mark.mininet, pytest.mark.slow]

FAT = dict(topology="fattree", k=4, workers=8)


def kinds(events: list[str]) -> list[str]:
    return [line.split()[1] for line in events]


@pytest.mark.parametrize("algorithm,density", [("switchml", 1.0), ("omnireduce", 0.3)], ids=["dense", "sparse"])
def test_switch_killed_mid_allreduce_on_a_fat_tree_stays_exact(algorithm, density):
    r = run_allreduce(elements=40_000, algorithm=algorithm, density=density, seed=21,
                      fail_switch=["tree@0.4"], **FAT)
    assert r["exact"], r.get("errors")
    (f,) = r["failures"]
    assert f["switch"] in r["switches_down"], r["switches_down"]
    assert f["on_tree"] and f["epoch"] == 1 and not f["partitioned"], f
    assert 0.4 <= f["at"] < 1
    assert f["detect_ms"] >= 0 and f["recompute_ms"] >= 0 and f["install_ms"] > 0   # causality, not speed
    k = kinds(r["events"])
    assert k.index("switch_exited") < k.index("switch_down") < k.index("rerouted"), r["events"]
    assert r["epoch"] == 1
    assert_clean()


@pytest.mark.net_timeout(600)
def test_ten_switch_kills_at_random_moments_each_exact_or_cleanly_partitioned():
    """One network; each run kills a random switch (seeded) at a random moment, then the
    switch is restarted for the next run. A worker's only edge switch partitions: every
    agent still running must say so; any other switch must leave the allreduce exact."""
    rng = random.Random(1)         # 3 of its 10 picks are a worker's only edge switch
    # window 16: 12 rounds of 16 blocks (of K values, in either variant), so a kill at up to
    # 80% still has rounds to cut off
    spec = RunSpec(elements=12 * 16 * wire.K, window=16, seed=1, give_up=20, **FAT)
    outcomes = []
    with Session(spec) as s:
        edge_only = only_edge_switches(s.g)
        for i in range(10):
            sw = rng.choice(switches(s.g))
            at = round(rng.uniform(0.1, 0.8), 2)
            r = s.allreduce(fail_switch=[f"{sw}@{at}"], seed=100 + i)
            (f,) = r["failures"]
            assert f["switch"] == sw and sw in r["switches_down"], (i, f, r["switches_down"])
            if sw in edge_only and not r["ok"]:
                # workers that were still running when the partition was announced stop with it
                # (one whose last result had already passed may finish first)
                assert f["partitioned"], (i, sw, f)
                assert all("partition" in e.lower() for e in r["errors"]), r["errors"]
                outcomes.append("partitioned")
            else:
                assert r["exact"], (i, sw, at, r.get("errors"))
                outcomes.append("exact")
            s.restart_switch(sw)
            assert sw in s.job.live_switches() and not s.job.state().partitioned
    assert outcomes.count("exact") >= 3 and "partitioned" in outcomes, outcomes
    assert_clean()


def test_restarted_switch_is_reprogrammed_and_rejoins_the_tree():
    spec = RunSpec(elements=20_000, seed=5, **FAT)
    with Session(spec) as s:
        sw = s.job.pick_tree_switch(0)
        epoch0 = s.job.trees().epoch
        s.kill_switch(sw)
        wait_until(lambda: sw not in s.job.live_switches(), what=f"the job to learn that {sw} died")
        assert all(sw not in t.parent for t in s.job.trees().trees)      # rerouted around it
        r = s.allreduce()
        assert r["exact"], r.get("errors")
        assert list(r["switches_down"]) == [sw]
        s.restart_switch(sw)
        trees = s.job.trees()
        assert trees.epoch == epoch0 + 2 and any(sw in t.parent for t in trees.trees)   # back on the tree
        r = s.allreduce(seed=6)
        assert r["exact"], r.get("errors")
        assert r["switches_down"] == {}
        assert s.job.switch_stats()[sw]["contributions"] > 0            # it aggregates again
        assert "switch_up" in kinds(s.events.lines())
    assert_clean()


@pytest.mark.bmv2
def test_bmv2_switch_killed_mid_allreduce_stays_exact():
    r = run_allreduce(elements=20_000, backend="bmv2", seed=22, fail_switch=["tree@0.4"], **FAT)
    assert r["exact"], r.get("errors")
    (f,) = r["failures"]
    assert f["on_tree"] and f["epoch"] == 1, f
    assert_clean()
