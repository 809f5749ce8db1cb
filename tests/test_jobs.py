"""The job interface (controller/job_protocol.py) on the in-process network of agglab/testkit/treenet.py:
what the session, the failure injector and the lab rely on instead of the job's attributes."""

from __future__ import annotations

import time

import pytest

from agglab.controller import topologies
from agglab.controller.addressing import assign_addresses
from agglab.controller.bml_job import BmlJob
from agglab.controller.job_protocol import Job
from agglab.controller.topologies import bcube
from agglab.testkit.treenet import TreeNet


@pytest.fixture
def net(tmp_path):
    return TreeNet(assign_addresses(topologies.build("fattree", k=4, workers=8)), "spt", 16,
                   tmp_path / "epoch.json")


def kinds(job) -> list[str]:
    return [line.split()[1] for line in job.events.lines()]


def test_a_recovered_link_reinstalls_only_between_allreduces(net):
    job = net.job
    a, b = job.pick_tree_link(0)
    job.link_changed(a, b, False, time.monotonic())
    assert job.trees().epoch == 1 and not job.trees().uses(a, b)
    with job.running():
        job.link_changed(a, b, True, time.monotonic())
        assert job.trees().epoch == 1 and kinds(job).count("trees_installed") == 1   # the start only
    job.link_changed(a, b, False, time.monotonic())        # down again: on no active tree now
    job.link_changed(a, b, True, time.monotonic())         # up, between allreduces: reinstall
    # the standby's thread says standby_ready whenever its precomputed trees are done: not in order
    steps = [k for k in kinds(job) if k != "standby_ready"]
    assert steps[-3:] == ["no_reinstall", "link_up", "trees_installed"] and job.trees().epoch == 2


def test_failure_records_are_a_copy_in_order(net):
    job = net.job
    for i in range(2):
        a, b = job.pick_tree_link(i)
        job.link_changed(a, b, False, time.monotonic())
    records = job.failure_records()
    assert [r["epoch"] for r in records] == [1, 2]
    records[0]["epoch"] = 99
    records.clear()
    assert [r["epoch"] for r in job.failure_records()] == [1, 2]


def test_pick_tree_link_is_a_switch_link_of_the_trees_and_deterministic(net):
    job = net.job
    for seed in range(5):
        a, b = job.pick_tree_link(seed)
        assert job.trees().uses(a, b)
        assert {job.g.nodes[a]["kind"], job.g.nodes[b]["kind"]} == {"switch"}
        assert job.pick_tree_link(seed) == (a, b)


def test_state_and_stats(net):
    job = net.job
    state = job.state()
    assert state.tree == "spt" and state.algorithm == "switchml" and state.window == 16 and len(state.tree_of_slot) == 16
    assert state.treeset is job.trees() and state.partitioned is None
    assert set(job.switch_stats()) == {n for n in job.g if job.g.nodes[n]["kind"] == "switch"}
    assert job.stats()["contributions"] == 0               # nothing sent yet


def test_both_jobs_are_jobs_and_bml_cannot_change_trees(tmp_path):
    g = assign_addresses(bcube(3, 1))
    bml = BmlJob(g, {}, 16, tmp_path / "epoch.json")
    assert isinstance(bml, Job)
    with pytest.raises(ValueError, match="cannot change its trees"):
        bml.reinstall("spt")
    assert bml.write_plans(tmp_path)                        # one plan per server


def test_the_epoch_file_gives_each_tree_its_slowest_link_before_and_after_a_reroute(tmp_path):
    """The agents floor their timers on these rates (hosts/slots.py path_rates)."""
    import json

    g = assign_addresses(topologies.build("fattree", k=4, workers=8))
    for u, v in g.edges:
        g.edges[u, v]["bw"] = 10.0
    switch_links = [(u, v) for u, v in g.edges if {g.nodes[u]["kind"], g.nodes[v]["kind"]} == {"switch"}]
    for u, v in switch_links[::3]:
        g.edges[u, v]["bw"] = 1.0                               # a third of the fabric slow
    epoch_file = tmp_path / "epoch.json"
    net = TreeNet(g, "spt", 16, epoch_file)

    def expected():
        return {str(t.id): min(g.edges[u, v]["bw"] for u, v in t.edges) for t in net.job.trees().trees}

    first = json.loads(epoch_file.read_text())
    assert first["tree_mbps"] == expected() and 1.0 in first["tree_mbps"].values()
    a, b = net.job.pick_tree_link(0)
    net.job.link_changed(a, b, False, time.monotonic())
    after = json.loads(epoch_file.read_text())
    assert after["epoch"] == 1 and after["tree_mbps"] == expected()
