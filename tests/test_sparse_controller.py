"""Controller side of the sparse pipeline on a two-level tree of software switches.

Why: the agg_job entries (shared with the dense pipeline), the reset list, the carry and the
sparse preload only make sense together with the data plane. A leaf-spine (spine s1 = root, leaves l1/l2 with two workers each) runs
real sparse rounds through in-process Pipelines; then the tree moves to a new epoch and a
lagging worker's probe must still get the round it missed, through the new tree.
"""

from __future__ import annotations

import numpy as np
import pytest

from agglab.ground import wire
from agglab.ground.schemes import ON_TREES
from agglab.controller import topologies, tree_install, trees
from agglab.controller.reroute import failover, sparse_failover
from agglab.controller.schemes import carry_for
from agglab.controller.addressing import assign_addresses
from agglab.controller.topology import neighbor_on_port, port
from agglab.testkit.frames import build
from agglab.testkit.treenet import PipeClient

SPARSE = wire.CONST["AGG_FLAG_SPARSE"]
NONE = wire.NEXT_NONE
ACK = wire.CONST["AGG_FLAG_ACK"]


class Net:
    """The leaf-spine with one Pipeline per switch; frames hop until they reach hosts."""

    def __init__(self):
        self.g = assign_addresses(topologies.leaf_spine(racks=2, hosts_per_rack=2, spines=1))
        self.clients = {sw: PipeClient(sw) for sw in ("s1", "l1", "l2")}
        self.reply_ports: dict = {}

    def install(self, epoch: int) -> tree_install.Installation:
        treeset = trees.compute("spt", self.g, epoch=epoch)
        return tree_install.install(self.clients, self.g, treeset, job=1, reply_ports=self.reply_ports)

    def send(self, host: str, **agg) -> dict[str, list[dict]]:
        """Inject host's sparse packet; everything delivered to hosts, by host."""
        leaf = next(iter(self.g.neighbors(host)))
        values = agg.pop("values", [])
        frame = build({"from": host, "agg": {"job": 1, "flags": SPARSE, **agg}, "values": values})
        pending, got = [(leaf, port(self.g, leaf, host), frame)], {}
        while pending:
            sw, p, f = pending.pop(0)
            for out_port, out in self.clients[sw].pipeline.process(p, f):
                nbr = neighbor_on_port(self.g, sw, out_port)
                if self.g.nodes[nbr]["kind"] == "switch":
                    pending.append((nbr, port(self.g, nbr, sw), out))
                else:
                    head = wire.unpack_agg(out, wire.AGG_OFFSET)
                    head["values"] = np.frombuffer(out, ">i4", wire.K, wire.AGG_OFFSET + wire.AGG_HEADER_BYTES)
                    got.setdefault(nbr, []).append(head)
        return got


@pytest.fixture
def net():
    return Net()


def run_two_rounds(net: Net) -> None:
    """Column 0 (slot 0): round block 0 from everyone, round block 4 from h1 and h4 only."""
    for h, nxt in (("h1", 4), ("h2", 8), ("h3", NONE)):
        assert net.send(h, block=0, next_block=nxt, exp=130, values=[1]) == {}
    done = net.send("h4", block=0, next_block=4, exp=131, values=[1])
    assert sorted(done) == ["h1", "h2", "h3", "h4"]
    assert all(r[0]["next_block"] == 4 and r[0]["values"][0] == 4 for r in done.values())
    assert net.send("h1", ver=1, block=4, next_block=NONE, exp=0, values=[0, 10]) == {}
    done = net.send("h4", ver=1, block=4, next_block=12, exp=133, values=[0, 20])
    assert sorted(done) == ["h1", "h2", "h3", "h4"]
    assert done["h2"][0]["next_block"] == 8 and done["h2"][0]["exp"] == 130
    assert list(done["h2"][0]["values"][:2]) == [0, 30]


def test_one_agg_job_entry_per_tree_port_and_freeze_removes_them(net):
    inst = net.install(epoch=0)
    got = {sw: sorted((key, action, params) for _h, key, action, params in c.pipeline.tables["agg_job"].entries())
           for sw, c in net.clients.items()}
    # s1 is the root: its leaves' ports get agg_child; each leaf gets agg_child_of for its
    # two workers (parent port = the port to s1) and agg_from_parent on that port; one
    # entry each, which the sparse rounds of run_two_rounds use as well as the dense ones
    assert sorted(a for _k, a, _p in got["s1"]) == ["agg_child"] * 2
    for leaf in ("l1", "l2"):
        up = port(net.g, leaf, "s1")
        assert sorted(a for _k, a, _p in got[leaf]) == ["agg_child_of"] * 2 + ["agg_from_parent"]
        assert all(p[-1] == up for _k, a, p in got[leaf] if a == "agg_child_of")
        assert [k[3] for k, a, _p in got[leaf] if a == "agg_from_parent"] == [up]
    assert tree_install.freeze(net.clients, inst) == 2 + 3 + 3
    assert all(len(c.pipeline.tables["agg_job"]) == 0 for c in net.clients.values())


def test_reset_covers_every_sparse_register(net):
    regs = net.clients["s1"].pipeline.registers
    assert {n for n in regs if n.startswith("sp_")} <= set(failover.REGISTERS)
    net.install(epoch=0)
    run_two_rounds(net)
    failover.reset(net.clients, net.clients)
    assert not any(regs[n].any() for n in regs)


def test_snapshot_names_the_round_each_worker_has_not_acknowledged(net):
    inst = net.install(epoch=0)
    run_two_rounds(net)
    s1 = net.clients["s1"]
    s1.register_write("sp_done", 2, 1)                # slot 2: done but not final -> not taken
    got = sparse_failover.sparse_snapshot(net.clients, inst, [0, 0, 0])
    # round 0 (ver 0): h1 and h4 sent block 4 since (acknowledged), h2 and h3 did not;
    # round 4 (ver 1): nobody sent anything later, so everyone may still lack it
    assert got.needs == {(0, 0): {"h2": 0, "h3": 0}, (0, 1): {"h1": 4, "h2": 4, "h3": 4, "h4": 4}}
    rnd = got.rounds[0, 1, 4]
    assert (rnd.ver, rnd.block, rnd.next_block, rnd.exp) == (1, 4, 8, 130)
    assert list(rnd.values[:3]) == [0, 30, 0]
    assert got.rounds[0, 0, 0].values[0] == 4 and got.rounds[0, 0, 0].next_block == 4


def test_preload_answers_a_lagging_probe_at_its_leaf(net):
    old = net.install(epoch=0)
    run_two_rounds(net)
    tree_install.freeze(net.clients, old)
    carry = sparse_failover.sparse_snapshot(net.clients, old, [0])
    failover.reset(net.clients, net.clients)
    new = net.install(epoch=1)
    writes = sparse_failover.sparse_preload(net.clients, new, [0], carry)
    assert writes == 2 * 3 * (6 + wire.K)           # both rounds held at l1, l2 and s1
    leaf = net.clients["l1"].pipeline.registers
    assert leaf["sp_bitmap"][1024] == 3 and leaf["sp_final"][1024] == 1 and leaf["sp_ack"][1024] == 0
    # h2 lost block 4's result (it had nothing for block 4): its probe, at the new epoch,
    # is answered by its leaf, which holds the result until h1 and h2 acknowledged it
    got = net.send("h2", epoch=1, ver=1, block=4, next_block=8, exp=130, flags=SPARSE | wire.FLAG_RETX)
    assert sorted(got) == ["h2"]
    res = got["h2"][0]
    assert (res["block"], res["next_block"], res["exp"], res["flags"] & wire.FLAG_RESULT) == (4, 8, 130, 1)
    assert list(res["values"][:2]) == [0, 30]


def test_unacknowledged_older_round_survives_a_reroute(net):
    """h3 and h4 sit out round 4; h3 lost round 0's result (in flight at the freeze). Both
    completed rounds move to the new tree: h3's probe for round 0 is answered and h1's
    packet for the round after 4 (version 0 again) does not start over round 0."""
    old = net.install(epoch=0)
    for h, nxt in (("h1", 4), ("h2", 4), ("h3", 8), ("h4", 8)):
        net.send(h, block=0, next_block=nxt, exp=130, values=[1])
    net.send("h1", ver=1, block=4, next_block=8, exp=130, values=[2])
    assert sorted(net.send("h2", ver=1, block=4, next_block=NONE, exp=0, values=[3])) == \
        ["h1", "h2", "h3", "h4"]
    tree_install.freeze(net.clients, old)
    carry = sparse_failover.sparse_snapshot(net.clients, old, [0])
    assert carry.needs[0, 0] == {"h3": 0, "h4": 0}
    assert carry.needs[0, 1] == {"h1": 4, "h2": 4, "h3": 4, "h4": 4}
    failover.reset(net.clients, net.clients)
    new = net.install(epoch=1)
    sparse_failover.sparse_preload(net.clients, new, [0], carry)
    assert net.send("h1", epoch=1, ver=0, block=8, next_block=NONE, exp=0, values=[7]) == {}
    got = net.send("h3", epoch=1, ver=0, block=0, next_block=8, exp=130, flags=SPARSE | wire.FLAG_RETX)
    assert sorted(got) == ["h3"]
    res = got["h3"][0]
    assert (res["block"], res["next_block"], res["ver"]) == (0, 4, 0) and res["values"][0] == 4
    s1 = net.clients["s1"].pipeline.registers
    assert s1["sp_block"][0] == 0 and s1["sp_final"][0] == 1      # round 0 still held


def test_custody_at_a_leaf_survives_a_reroute(net):
    """The gap the root-only snapshot had: h2 lacks round 0's result, which only its leaf
    l1 still holds (the root reused version 0 for round 8 once l1 had sent round 4 up).
    After the reroute h2 still gets round 0, then 4, and round 8 completes exactly."""
    old = net.install(epoch=0)
    for h, nxt in (("h1", 4), ("h2", 8), ("h3", 4), ("h4", 4)):
        net.send(h, block=0, next_block=nxt, exp=0, values=[1])     # result 0: h2 "loses" it
    for h in ("h1", "h3", "h4"):
        net.send(h, ver=1, block=4, next_block=8, exp=0, values=[0, 2])
    assert net.send("h1", ver=0, block=8, next_block=NONE, exp=0, values=[0, 0, 10]) == {}   # held at l1
    for h in ("h3", "h4"):
        assert net.send(h, ver=0, block=8, next_block=NONE, exp=0, values=[0, 0, 10]) == {}
    s1 = net.clients["s1"].pipeline.registers
    assert s1["sp_block"][0] == 8 and s1["sp_final"][0] == 0       # the root moved on
    tree_install.freeze(net.clients, old)
    carry = sparse_failover.sparse_snapshot(net.clients, old, [0])
    assert carry.needs[0, 0] == {"h2": 0}
    failover.reset(net.clients, net.clients)
    new = net.install(epoch=1)
    sparse_failover.sparse_preload(net.clients, new, [0], carry)
    # every worker resends for the round it is in (the agents do so on an epoch change)
    got = net.send("h2", epoch=1, ver=0, block=0, next_block=8, exp=0, flags=SPARSE | wire.FLAG_RETX)
    assert got["h2"][0]["block"] == 0 and got["h2"][0]["values"][0] == 4
    got = net.send("h2", epoch=1, ver=1, block=4, next_block=8, exp=0, flags=SPARSE | wire.FLAG_RETX)
    assert got["h2"][0]["block"] == 4 and got["h2"][0]["values"][1] == 6
    for h in ("h1", "h3", "h4"):
        net.send(h, epoch=1, ver=0, block=8, next_block=NONE, exp=0, values=[0, 0, 10],
                 flags=SPARSE | wire.FLAG_RETX)
    done = net.send("h2", epoch=1, ver=0, block=8, next_block=NONE, exp=0, values=[0, 0, 1])
    for h in ("h1", "h3", "h4"):                 # retransmissions until every partial is in
        done.update(net.send(h, epoch=1, ver=0, block=8, next_block=NONE, exp=0, values=[0, 0, 10],
                             flags=SPARSE | wire.FLAG_RETX))
    assert sorted(done) == ["h1", "h2", "h3", "h4"]
    assert all(r[-1]["block"] == 8 and r[-1]["values"][2] == 31 and r[-1]["next_block"] == NONE
               for r in done.values())


def test_subtree_without_data_receives_the_result(net):
    net.install(epoch=0)
    for h, nxt in (("h1", 4), ("h2", 4), ("h3", 8)):
        net.send(h, block=0, next_block=nxt, exp=130, values=[1])
    assert sorted(net.send("h4", block=0, next_block=8, exp=130, values=[1])) == ["h1", "h2", "h3", "h4"]
    net.send("h1", ver=1, block=4, next_block=NONE, exp=0, values=[5])
    got = net.send("h2", ver=1, block=4, next_block=NONE, exp=0, values=[5])
    assert sorted(got) == ["h1", "h2", "h3", "h4"]      # h3, h4 (under l2) had nothing for block 4
    # the subtree adopted round 4 (l2 had nothing for it); h3 and h4 acknowledge it and l2,
    # once both are done, sends one ACK up: the root's version 1 is then free for all children
    l2 = net.clients["l2"].pipeline.registers
    assert l2["sp_block"][1024] == 4 and l2["sp_final"][1024] == 1
    assert net.send("h3", ver=1, block=4, flags=SPARSE | ACK, values=None) == {}
    assert l2["sp_ack"][1024] == 1
    s1 = net.clients["s1"].pipeline.registers
    before = int(s1["sp_ack"][1024])
    assert net.send("h4", ver=1, block=4, flags=SPARSE | ACK, values=None) == {}
    assert l2["sp_ack"][1024] == 3 and int(s1["sp_ack"][1024]) != before


def test_placement_oldest_at_the_workers_newest_above_and_conflicts_reported():
    from agglab.controller.tree_install import SwitchRole

    roles = {"s1": SwitchRole("s1", 0, True, ["l1", "l2"], None),
             "l1": SwitchRole("l1", 0, False, ["h1", "h2"], "s1"),
             "l2": SwitchRole("l2", 0, False, ["h3", "h4"], "s1")}
    place = sparse_failover.placement
    assert place(roles, {"h1": 4, "h2": 12}) == {"l1": 4, "s1": 12}
    assert place(roles, {"h1": 12, "h3": 4}) == {"l1": 12, "l2": 4, "s1": 12}
    assert place(roles, {}) == {}
    mixed = dict(roles, s1=SwitchRole("s1", 0, True, ["l1", "h5"], None))
    clash: list = []
    assert place(mixed, {"h5": 4, "h1": 12}, clash) == {"l1": 12, "s1": 4} and clash == ["s1"]


def test_carry_is_chosen_by_the_algorithm_and_omnireduce_keeps_its_dense_lead_round(net):
    """A switchml reroute carries the dense versions only; an omnireduce reroute carries
    the sparse rounds and the dense lead rounds too (the sparse agent's lead round runs
    on the dense pipeline), and a worker that lost its lead result is answered after."""
    old = net.install(epoch=0)
    run_two_rounds(net)                                  # sparse rounds on slot 0
    for h in ("h1", "h2", "h3"):                         # dense lead round of slot 1
        assert net.send(h, flags=0, slot=1, block=1, exp=130, values=[5]) == {}
    assert sorted(net.send("h4", flags=0, slot=1, block=1, exp=131, values=[5])) == ["h1", "h2", "h3", "h4"]
    tree_install.freeze(net.clients, old)
    dense = carry_for("switchml").snapshot(net.clients, old, [0, 0])
    assert sorted(dense.dense) == [1] and dense.sparse is None and dense.slots == 1
    both = carry_for("omnireduce")
    carried = both.snapshot(net.clients, old, [0, 0])
    assert sorted(carried.dense) == [1] and carried.dense[1].values[0] == 20
    assert carried.sparse.needs[0, 1] == {"h1": 4, "h2": 4, "h3": 4, "h4": 4}
    assert carried.slots == 1 + len(carried.sparse.needs)
    failover.reset(net.clients, net.clients)
    new = net.install(epoch=1)
    both.preload(net.clients, new, [0, 0], carried)
    got = net.send("h2", epoch=1, flags=wire.FLAG_RETX, slot=1, block=1, exp=130, values=[5])
    # the leaf sends it up, the root answers from the preload, the leaf multicasts it down
    assert sorted(got) == ["h1", "h2"] and got["h2"][0]["values"][0] == 20 and got["h2"][0]["exp"] == 131
    got = net.send("h2", epoch=1, ver=1, block=4, next_block=8, exp=130, flags=SPARSE | wire.FLAG_RETX)
    assert sorted(got) == ["h2"] and list(got["h2"][0]["values"][:2]) == [0, 30]


def test_carry_for_an_unknown_algorithm_names_the_known_ones():
    assert {a: type(carry_for(a)).__name__ for a in ON_TREES} == {       # ring/ps, atp: no tree, no carry
        "switchml": "DenseCarry", "omnireduce": "SparseCarry"}
    with pytest.raises(ValueError, match="known: switchml, omnireduce"):
        carry_for("allgather")
