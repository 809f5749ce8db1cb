"""BML under failure, in process: the relay schedule (controller/trees/bml_relay.py) over a
BCube with a failed server link or level switch sums exactly, every server runs its steps
in one global order without waiting on itself (threads with a fake switch), and the job
re-plans, clears the old entries and tells the servers. The Mininet run is in
tests/test_e2e_trees.py (BML with --fail)."""

from __future__ import annotations

import json
import threading
import time

import numpy as np
import pytest

from agglab.controller.addressing import assign_addresses
from agglab.controller.bml_job import BmlJob
from agglab.controller.topologies import bcube
from agglab.controller.topology import hosts as all_hosts, switches
from agglab.controller.trees.base import TreeError
from agglab.controller.trees.bml_relay import host_steps, relay_plan, simulate_relay
from agglab.hosts.bml import run_steps
from tests.treenet import PipeClient


def _graph(n=3, k=1):
    return assign_addresses(bcube(n, k))


def _inputs(hosts, seed=0):
    rng = np.random.default_rng(seed)
    return {h: rng.integers(-2**20, 2**20, 257).astype(np.int32) for h in hosts}


def _fail_link(g, h, sw):
    g.edges[h, sw]["up"] = False


@pytest.mark.parametrize("n,k", [(3, 1), (2, 2), (4, 1)])
def test_relay_sum_is_exact_with_each_single_server_link_failed(n, k):
    g0 = _graph(n, k)
    hosts = all_hosts(g0)
    arrays = _inputs(hosts, n * 10 + k)
    want = sum(a.astype(np.int64) for a in arrays.values()).astype(np.int32)
    for h in hosts:
        for sw in list(g0.neighbors(h)):
            g = g0.copy()
            _fail_link(g, h, sw)
            plan = relay_plan(g, hosts)
            assert not plan.uses(h, sw)
            out = simulate_relay(arrays, plan)
            assert all(np.array_equal(out[x], want) for x in hosts), (h, sw)


def test_relay_avoids_a_dead_level_switch_and_a_cut_off_server_is_a_partition():
    g = _graph()
    hosts = all_hosts(g)
    sw = switches(g)[0]
    g.nodes[sw]["up"] = False
    plan = relay_plan(g, hosts)
    assert sw not in plan.switches()
    for other in g.neighbors(hosts[0]):
        g.edges[hosts[0], other]["up"] = False
    with pytest.raises(TreeError, match=hosts[0]):
        relay_plan(g, hosts)


def test_every_server_runs_its_steps_in_one_order_and_ends_with_the_exact_sum():
    """Each server in its own thread, each step a rendezvous of its members (the switch's sum):
    the global order never deadlocks and run_steps (the worker's code) gets the total."""
    g = _graph()
    hosts = all_hosts(g)
    _fail_link(g, hosts[4], next(iter(g.neighbors(hosts[4]))))
    plan = relay_plan(g, hosts)
    arrays = _inputs(hosts, 7)
    want = sum(a.astype(np.int64) for a in arrays.values()).astype(np.int32)
    barriers = {s.index: threading.Barrier(len(s.members), timeout=10) for s in plan.steps}
    pots = {s.index: {} for s in plan.steps}
    results = {}

    def server(h):
        def group_sum(step, contribution):
            pots[step["tree"]][h] = contribution
            barriers[step["tree"]].wait()
            total = sum(pots[step["tree"]].values())
            barriers[step["tree"]].wait()
            return total
        results[h] = run_steps(arrays[h], host_steps(plan, h), group_sum)

    threads = [threading.Thread(target=server, args=(h,)) for h in hosts]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert all(np.array_equal(results[h], want) for h in hosts)


def test_the_job_replans_clears_the_old_entries_and_tells_the_servers(tmp_path):
    g = _graph()
    clients = {sw: PipeClient(sw) for sw in switches(g)}
    job = BmlJob(g, clients, 64, tmp_path / "epoch.json").start()
    job.write_plans(tmp_path)
    h = job.workers[0]
    sw = next(iter(g.neighbors(h)))
    job.link_changed(h, sw, False, time.monotonic())
    job.link_changed(sw, h, False, time.monotonic())          # the other end: nothing more
    (rec,) = job.failure_records()
    assert rec["epoch"] == 1 and not rec["partitioned"] and rec["steps"] >= 2
    assert json.loads((tmp_path / "epoch.json").read_text())["status"] == "replan"
    keys = [key for c in clients.values() for _h, key, _a, _p in c.pipeline.tables["agg_job"].entries()]
    assert keys and all(key[2] == 1 for key in keys)            # only the relay epoch's entries
    port_of = g.edges[h, sw]["ports"][sw]
    assert not [k for _h, k, _a, _p in clients[sw].pipeline.tables["agg_job"].entries() if k[3] == port_of]
    plan = json.loads((tmp_path / f"{h}.e1.bml.json").read_text())
    assert plan["variant"] == "relay" and sw not in plan["nics"]
    (tmp_path / "next").mkdir()
    job.write_plans(tmp_path / "next")                         # the next allreduce runs the relay plan
    assert json.loads((tmp_path / "next" / f"{h}.bml.json").read_text())["variant"] == "relay"
