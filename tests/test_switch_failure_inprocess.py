"""Switch failures on an in-process k=4 fat-tree (agglab/testkit/treenet.py): a switch that dies
mid-allreduce takes its tables, registers and every packet in it along; the controller
reroutes around it once and the allreduce stays exact, dense and sparse, whether the
dead switch was an inner switch or the root of the tree (whose registers held the
completed results). An edge switch's death partitions: every agent ends with
NetworkPartitionError, none hangs.

In-process as well as in Mininet (test_e2e_switch_failures.py) for the same reason as
test_reroute_inprocess.py: loss on every hop and many failure moments, in seconds, no root.
"""

from __future__ import annotations

import numpy as np
import pytest

from agglab.controller import aggregate, topologies
from agglab.controller.addressing import assign_addresses
from agglab.hosts.diagnostics import NetworkPartitionError
from agglab.hosts.sparse_workload import sparse_gradient
from agglab.hosts.workload import make_gradient
from agglab.testkit.treenet import TreeNet
from agglab.ground import wire

K = wire.K

ELEMENTS = 256 * K         # 256 K-blocks
GIVE_UP = 60.0


def fat_tree(workers: int = 8):
    return assign_addresses(topologies.build("fattree", k=4, workers=workers))


def root_of_tree(job, i: int) -> str:
    return job.trees().trees[0].root


def inner_switch(job, i: int) -> str:
    """A switch of the tree with children that is neither the root nor any worker's edge switch."""
    t = job.trees().trees[0]
    return next(n for n in t.nodes if job.g.nodes[n]["kind"] == "switch" and n != t.root
                and job.g.nodes[n].get("tier") != "edge" and t.children(n))


def assert_exact(results, arrays):
    errors = [f"rank {r}: {x!r}" for r, x in enumerate(results) if isinstance(x, BaseException)]
    assert not errors, "\n".join(errors)
    expected = np.sum(np.stack(arrays).astype(np.int64), axis=0).astype(np.int32)
    for out, _stats in results:
        assert np.array_equal(out, expected)


@pytest.mark.parametrize("pick", [root_of_tree, inner_switch, None], ids=["root", "inner", "tree@"])
@pytest.mark.parametrize("at", [0.2, 0.6])
@pytest.mark.parametrize("sparse", [False, True], ids=["dense", "sparse"])
def test_allreduce_survives_a_switch_death(tmp_path, pick, at, sparse):
    # dense: 2% loss on every hop (results lost on one path while the root dies: agg_block);
    # sparse: no loss, because a sparse round whose result was lost just below a switch that
    # then dies is gone once every other subtree reused its version (docs/design/failures.md "Limits")
    net = TreeNet(fat_tree(), "spt", 64, tmp_path / "epoch.json", loss=0.0 if sparse else 0.02, seed=7)
    if sparse:
        arrays = [sparse_gradient(r, ELEMENTS, "int32", 0.3, "random", K, 7, 0) for r in range(8)]
    else:
        arrays = [make_gradient(r, ELEMENTS, "int32", 7) for r in range(8)]
    results, injected = net.run(arrays, fail_at=(at,), fail_seed=2, pick=pick, kill=True, sparse=sparse,
                                window=64, give_up=GIVE_UP)
    assert_exact(results, arrays)
    (inj,) = injected
    assert at <= inj["at"] < 1, injected
    dead = inj["switch"]
    assert net.job.g.nodes[dead]["up"] is False
    (rec,) = net.job.failure_records()
    assert rec["switch"] == dead and rec["epoch"] == 1 and not rec.get("partitioned"), rec
    assert all(dead not in t.parent for t in net.job.trees().trees)     # the new trees avoid it
    assert all(stats.epoch_changes == 1 for _out, stats in results)


@pytest.mark.parametrize("sparse", [False, True], ids=["dense", "sparse"])
def test_root_death_in_a_tenants_slot_range_spares_the_other_slots(tmp_path, sparse):
    # a job owning slots 512..1023 (another tenant's are 0..511): the reroute around its dead
    # root reads, resets and preloads only its own slots (dense: the live roots' values read
    # ahead, the dead root's results from the switches below it; sparse: the walk)
    base = 512
    net = TreeNet(fat_tree(), "spt", 64, tmp_path / "epoch.json", loss=0.0 if sparse else 0.02, seed=7,
                  job_args={"slot_base": base, "slots": 512})
    others = {sw: 100 + i for i, sw in enumerate(sorted(net.clients))}     # the other tenant's cells (8-bit counts)
    for sw, v in others.items():
        net.clients[sw].commands([f"register_write agg_values {7 * 32} {v}",
                                  f"register_write agg_count {base - 1} {v}"])
    if sparse:
        arrays = [sparse_gradient(r, ELEMENTS, "int32", 0.3, "random", K, 7, 0) for r in range(8)]
    else:
        arrays = [make_gradient(r, ELEMENTS, "int32", 7) for r in range(8)]
    results, injected = net.run(arrays, fail_at=(0.4,), fail_seed=2, pick=root_of_tree, kill=True,
                                sparse=sparse, window=64, give_up=GIVE_UP)
    assert_exact(results, arrays)
    (inj,) = injected
    (rec,) = net.job.failure_records()
    assert rec["switch"] == inj["switch"] and rec["epoch"] == 1 and not rec.get("partitioned"), rec
    for sw, v in others.items():
        if sw == inj["switch"]:
            continue                            # its registers died with it
        assert net.clients[sw].register_read("agg_values", 7 * 32) == v, sw
        assert net.clients[sw].register_read("agg_count", base - 1) == v, sw


def test_tree_pick_never_takes_a_workers_only_edge_switch(tmp_path):
    net = TreeNet(fat_tree(), "spt", 16, tmp_path / "epoch.json")
    edges = {n for n, d in net.g.nodes(data=True) if d.get("tier") == "edge"}
    picked = {net.job.pick_tree_switch(seed) for seed in range(40)}
    assert picked and not picked & edges
    tree_nodes = {n for t in net.job.trees().trees for n in t.parent}
    assert picked <= tree_nodes                                         # on the active tree
    assert all(any(len(t.children(s)) >= 2 for t in net.job.trees().trees) for s in picked)   # aggregating


def test_edge_switch_death_partitions_every_agent_cleanly(tmp_path):
    net = TreeNet(fat_tree(), "spt", 64, tmp_path / "epoch.json", seed=3)
    arrays = [make_gradient(r, ELEMENTS, "int32", 3) for r in range(8)]
    edge_of_rank0 = next(iter(net.g.neighbors(net.hosts[0])))
    results, injected = net.run(arrays, fail_at=(0.3,), pick=lambda job, i: edge_of_rank0, kill=True,
                                window=64, give_up=GIVE_UP)
    assert all(isinstance(x, NetworkPartitionError) for x in results), results
    (rec,) = net.job.failure_records()
    assert rec["switch"] == edge_of_rank0 and rec["partitioned"]


def test_killed_root_restarted_between_runs_is_the_root_again(tmp_path):
    """The root dies mid-run (rerouted, exact); restarted between runs, it is reinstalled at
    once and the next allreduce runs through it, exact."""
    net = TreeNet(fat_tree(), "spt", 64, tmp_path / "epoch.json", loss=0.01, seed=4)
    arrays = [make_gradient(r, ELEMENTS, "int32", 4) for r in range(8)]
    root = net.job.trees().trees[0].root
    results, _ = net.run(arrays, fail_at=(0.3,), pick=lambda job, i: root, kill=True, window=64,
                         give_up=GIVE_UP)
    assert_exact(results, arrays)
    assert net.job.trees().epoch == 1 and all(root not in t.parent for t in net.job.trees().trees)
    net.restart(root)                        # between runs: reinstalled at once
    assert net.job.trees().epoch == 2 and net.job.trees().trees[0].root == root
    results, _ = net.run(arrays, window=64, give_up=GIVE_UP)
    assert_exact(results, arrays)
    assert root in net.job.live_switches()
    assert aggregate.read_stats(net.clients[root])["completions"] > 0     # the new root aggregated


def test_restart_while_running_waits_for_the_next_prepare(tmp_path):
    net = TreeNet(fat_tree(), "spt", 64, tmp_path / "epoch.json", seed=6)
    sw = inner_switch(net.job, 0)
    net.kill(sw)
    with net.job.running():                  # as if an allreduce ran: no tree change under it
        net.restart(sw)
        assert net.job.trees().epoch == 1 and all(sw not in t.parent for t in net.job.trees().trees)
    arrays = [make_gradient(r, ELEMENTS, "int32", 6) for r in range(8)]
    results, _ = net.run(arrays, window=64, give_up=GIVE_UP)     # its prepare reinstalls first
    assert_exact(results, arrays)
    assert net.job.trees().epoch == 2 and any(sw in t.parent for t in net.job.trees().trees)
    assert "switch_up" in " ".join(net.job.events.lines())
