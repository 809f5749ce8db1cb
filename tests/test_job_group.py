"""One failure event, every job told (controller/job_group.py), in process: two tenant jobs
on a fat-tree's shared switches, programmed into real software-switch pipelines. The
end-to-end runs (both jobs exact under `--jobs 2 --fail`/`--fail-switch`) are in
tests/test_e2e_tenants.py."""

from __future__ import annotations

import json
import time

import pytest

from agglab.controller import topologies
from agglab.controller.addressing import assign_addresses
from agglab.controller.events import EventLog
from agglab.controller.schemes import carry_for
from agglab.controller.tree_job import TreeJob
from agglab.controller.job_group import JobGroup
from agglab.controller.topology import switches, workers as worker_hosts
from agglab.ground import wire
from tests.treenet import PipeClient


@pytest.fixture
def two(tmp_path):
    """Jobs 0 and 1 on a k=4 fat-tree, 4 workers each (hosts interleaved, as --jobs does)."""
    g = assign_addresses(topologies.build("fattree", k=4, workers=8))
    clients = {sw: PipeClient(sw) for sw in switches(g)}
    hosts, events, replies = worker_hosts(g), EventLog(), {}
    size = wire.SLOTS // 2
    jobs = [TreeJob(g, clients, "spt", hosts[j::2], 8, tmp_path / f"e{j}.json", carry_for=carry_for, job=j,
                    events=events,
                    drain=0.0, standby=False, slot_base=j * size, slots=size, reply_ports=replies).start()
            for j in range(2)]
    return g, clients, jobs, JobGroup(jobs)


def _entries(clients, job: int, epoch: int) -> int:
    return sum(1 for c in clients.values() if not c.dead
               for _h, key, _a, _p in c.pipeline.tables["agg_job"].entries() if key[0] == job and key[2] == epoch)


def test_a_link_both_jobs_use_reroutes_both_and_is_logged_once(two):
    g, clients, jobs, group = two
    a, b = group.pick_tree_link(0)
    assert all(j.trees().uses(a, b) for j in jobs)          # picked on both jobs' trees
    group.link_changed(a, b, False, time.monotonic())
    group.link_changed(b, a, False, time.monotonic())       # the other end's netlink event: nothing more
    assert [j.trees().epoch for j in jobs] == [1, 1]
    assert not any(j.trees().uses(a, b) for j in jobs)
    assert [r["job"] for r in group.failure_records()] == [0, 1]
    kinds = [line.split()[1] for line in jobs[0].events.lines()]
    assert kinds.count("link_down") == 1 and kinds.count("rerouted") == 2
    for j in jobs:                                            # each job's new entries, none of the old
        assert _entries(clients, j.job, 1) > 0 and _entries(clients, j.job, 0) == 0


def test_a_link_only_one_job_uses_reroutes_only_that_one(two):
    g, clients, jobs, group = two
    only0 = sorted({e for t in jobs[0].trees().trees for e in t.edges
                    if all(g.nodes[n]["kind"] == "switch" for n in e)} -
                   {e for t in jobs[1].trees().trees for e in t.edges})
    if not only0:
        pytest.skip("spt gave both jobs the same switch links on this graph")
    group.link_changed(*only0[0], False, time.monotonic())
    assert [j.trees().epoch for j in jobs] == [1, 0]


def test_a_dead_switch_reroutes_every_job_on_it_and_a_restart_brings_it_back_for_both(two):
    g, clients, jobs, group = two
    sw = group.pick_tree_switch(0)
    assert all(any(sw in t.parent for t in j.trees().trees) for j in jobs)
    clients[sw].dead = True
    group.switch_changed(sw, False, time.monotonic())
    assert [j.trees().epoch for j in jobs] == [1, 1]
    assert all(sw not in t.parent for j in jobs for t in j.trees().trees)
    assert {r["switch"] for r in group.failure_records()} == {sw} and len(group.failure_records()) == 2
    clients[sw] = PipeClient(sw)
    programmed = []
    group.switch_changed(sw, True, time.monotonic(), program=lambda: programmed.append(sw))
    assert programmed == [sw]                                 # forwarding once, not once per job
    assert [j.trees().epoch for j in jobs] == [2, 2]
    assert sw in group.live_switches()


def test_a_reroute_that_fails_on_a_second_dead_switch_does_not_keep_the_other_job_from_rerouting(two):
    """A switch both jobs use dies while another switch, on job 0's trees only, is hung (chaos
    seed 12: a8 stopped, a3 killed): job 0's reroute fails on the hung switch. Job 1 must still
    be told (it used to be skipped and kept the dead switch on its trees: its workers timed
    out), and once the hung switch is declared dead job 0 hears of it too (here an edge
    switch of its own: a clean partition)."""
    g, clients, jobs, group = two
    x = group.pick_tree_switch(0)
    on = [{n for t in j.trees().trees for n in t.parent} for j in jobs]
    ys = sorted(s for s in on[0] - on[1] - {x} if g.nodes[s]["kind"] == "switch")
    assert ys, on                                   # spt on k=4: job 0 has edge switches job 1 has not
    y = ys[0]
    clients[y].dead = True                          # hung: answers nothing, not yet declared dead
    clients[x].dead = True
    with pytest.raises(RuntimeError, match="job 0"):
        group.switch_changed(x, False, time.monotonic())
    assert jobs[1].trees().epoch > 0 and x not in {n for t in jobs[1].trees().trees for n in t.parent}
    group.switch_changed(y, False, time.monotonic())        # the probe fences the hung one
    status = [json.loads(j.epoch_file.read_text())["status"] for j in jobs]
    assert status == ["partitioned", "ok"], status
    assert x not in {n for t in jobs[1].trees().trees for n in t.parent}
