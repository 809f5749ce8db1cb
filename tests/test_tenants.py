"""Tenant jobs sharing switches and hostile frames, in process.

The controller's side of isolation: jobs on one switch get disjoint slot ranges, a job's
register reset never writes another job's slots, and every worker's port admits only its
own rank. The fuzzer's side: every frame it builds is rejected by the software switch's
pipeline for the reason the fuzzer says (the network test, tests/test_e2e_tenants.py, does
the same through a running switch while a job runs). The data-plane rules themselves are
conformance vectors (tenant_isolation, forged_contributions, bad_lengths), on both targets.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from agglab.controller.addressing import assign_addresses
from agglab.controller.schemes import carry_for
from agglab.controller.tree_job import TreeJob
from agglab.controller.topology import single_switch
from agglab.ground import wire
from agglab.ground.runspec import RunSpec
from agglab.hosts.fuzz import KINDS, Fuzzer
from agglab.softswitch.pipeline import Pipeline
from agglab.softswitch.roles import ANY_WORKER, REJECTS
from agglab.testkit.treenet import PipeClient


def two_tenants(tmp_path, window=4):
    """Jobs 5 and 6 on one switch: h1,h3 (slots 0..511) and h2,h4 (slots 512..1023)."""
    g = assign_addresses(single_switch(4))
    clients = {"s1": PipeClient("s1")}
    replies: dict = {}
    a = TreeJob(g, clients, "spt", ["h1", "h3"], window, tmp_path / "a.json", carry_for=carry_for, job=5, slot_base=0, slots=512,
                reply_ports=replies).start()
    b = TreeJob(g, clients, "spt", ["h2", "h4"], window, tmp_path / "b.json", carry_for=carry_for, job=6, slot_base=512, slots=512,
                reply_ports=replies).start()
    return g, clients["s1"].pipeline, a, b


def test_each_job_owns_its_slot_range_and_each_worker_port_its_rank(tmp_path):
    g, p, a, b = two_tenants(tmp_path)
    entries = {key: (action, params) for _h, key, action, params in p.tables["agg_job"].entries()}
    port = {h: g.edges[h, "s1"]["ports"]["s1"] for h in ("h1", "h2", "h3", "h4")}
    # agg_child(child, fan_in, mgrp, slot_base, slots, worker): rank 0/1 of each job behind its port
    assert entries[(5, 0, 0, port["h1"])][1][3:] == (0, 512, 0)
    assert entries[(5, 0, 0, port["h3"])][1][3:] == (0, 512, 1)
    assert entries[(6, 0, 0, port["h2"])][1][3:] == (512, 512, 0)
    assert entries[(6, 0, 0, port["h4"])][1][3:] == (512, 512, 1)
    assert len(entries) == 4                         # no job has an entry on another job's port
    assert all(params[5] != ANY_WORKER for _a, params in entries.values())


def test_one_jobs_reset_leaves_the_other_jobs_slots_alone(tmp_path):
    _g, p, a, b = two_tenants(tmp_path, window=4)
    regs = p.registers
    # state in flight for both jobs: a's slot 1 (index 1) and b's slot 1 (index 513), both versions
    for r in (1, 513, wire.SLOTS + 1, wire.SLOTS + 513):
        regs["agg_count"][r] = 1
        regs["agg_bitmap"][r] = 1
        regs["agg_values"][r * wire.K:(r + 1) * wire.K] = 7
    regs["sp_next"][513 * wire.MAX_WORKERS] = 9
    b.prepare(4)
    assert regs["agg_count"][1] == 1 and regs["agg_count"][wire.SLOTS + 1] == 1       # job a untouched
    assert (regs["agg_values"][1 * wire.K:2 * wire.K] == 7).all()
    assert regs["agg_count"][513] == 0 and regs["agg_count"][wire.SLOTS + 513] == 0   # job b reset
    assert not regs["agg_values"][513 * wire.K:514 * wire.K].any()
    assert regs["sp_next"][513 * wire.MAX_WORKERS] == 0
    a.prepare(4)
    assert regs["agg_count"][1] == 0 and not regs["agg_values"].any()


def test_a_job_alone_keeps_the_whole_register_reset(tmp_path):
    g = assign_addresses(single_switch(2))
    clients = {"s1": PipeClient("s1")}
    job = TreeJob(g, clients, "spt", ["h1", "h2"], 4, tmp_path / "e.json", carry_for=carry_for).start()
    clients["s1"].pipeline.registers["agg_count"][900] = 3       # beyond its window
    job.prepare(4)
    assert clients["s1"].pipeline.registers["agg_count"][900] == 0


@pytest.mark.parametrize("changes, words", [
    (dict(jobs=0), "--jobs must be within"),
    (dict(jobs=17), "--jobs must be within"),
    (dict(jobs=2, window=600), "each job owns 512 slots"),
    (dict(jobs=2, algorithm="ring"), "in-network pipelines"),
    (dict(jobs=2, job_loss=[0.1]), "one probability per job"),
    (dict(jobs=2, job_loss=[0.1, 1.5]), "within [0, 1]"),
    (dict(jobs=2, job=255), "8 bits"),
])
def test_bad_tenant_options_are_refused_with_one_line(changes, words):
    with pytest.raises(ValueError, match=None) as exc:
        RunSpec(**changes).validate()
    assert words in str(exc.value) and "\n" not in str(exc.value)


def test_tenant_fields_derive_hosts_slots_window_and_loss():
    spec = RunSpec(workers=3, jobs=4, elements=10**6, loss=0.01, job_loss=[0.1, 0, 0, 0]).validate()
    assert (spec.hosts, spec.slots_per_job, spec.default_window()) == (12, 256, 128)
    assert [spec.loss_of(j) for j in range(4)] == [0.1, 0, 0, 0]
    assert RunSpec(jobs=16, elements=10**6).validate().default_window() == 64
    assert RunSpec.from_dict(spec.to_dict()) == spec


def test_every_fuzzed_frame_is_rejected_for_the_reason_the_fuzzer_states():
    p = Pipeline(seed=1)
    # a job on ports 1, 2; the fuzzer sends on port 3, which is in no job
    for line in ("table_add agg_job agg_child 4 0 2 1 => 0 2 1 0 1024 0",
                 "table_add agg_job agg_child 4 0 2 2 => 1 2 1 0 1024 1"):
        p.command(line)
    fz = Fuzzer("02:00:00:00:00:03", "10.0.0.3", seed=3, job=4, tree=0, epoch=2)
    expected, kinds = Counter(), Counter()
    for frame, kind, reason in fz.frames(3000):
        assert p.process(3, frame) == [], kind
        expected[reason] += 1
        kinds[kind] += 1
    assert set(kinds) == set(KINDS)
    got = {REJECTS[i]: int(n) for i, n in enumerate(p.counters["agg_rejects"]) if n}
    assert got == dict(expected)
    assert {"malformed", "length", "no_entry"} <= set(got)
    assert int(p.counters["agg_stats"][4]) == 3000                     # STAT_REJECT: every frame
    assert not p.registers["agg_bitmap"].any() and not p.registers["sp_bitmap"].any()


def test_the_same_frames_from_a_member_port_never_reach_the_registers_unless_they_fit_the_entry():
    """From job 4's rank-0 port, fuzzed frames are still rejected unless they carry exactly
    (job 4, tree 0, epoch 2, worker 0) and a slot in range: count what got through."""
    p = Pipeline(seed=1)
    p.command("table_add agg_job agg_child 4 0 2 1 => 0 2 1 0 1024 0")
    fz = Fuzzer("02:00:00:00:00:01", "10.0.0.1", seed=4, job=4, tree=0, epoch=2)
    admitted = 0
    for frame, _kind, _reason in fz.frames(2000):
        p.process(1, frame)
        head = frame[wire.AGG_OFFSET:wire.AGG_OFFSET + 7] if len(frame) >= wire.AGG_OFFSET + 7 else b""
        admitted += head[:3] == bytes([4, 0, 2]) and head[6:7] == b"\x00"
    stats = p.counters["agg_stats"]
    # the replays carry job 4 and tree 0 but an older epoch: none may count as a contribution
    assert admitted == 0
    assert int(stats[0]) == 0 and int(stats[2]) == 0        # no contribution, not even a duplicate
    assert int(stats[4]) == 2000
    assert not np.asarray(p.registers["agg_count"]).any()


def test_the_bulk_reroutes_install_plan_carries_the_slot_range_and_ranks(tmp_path):
    """A reroute on software switches installs from tree_install.plan (command lines), not
    install(): the same slot range and ranks must be in its agg_job lines."""
    from agglab.controller import tree_install

    g, _p, _a, b = two_tenants(tmp_path)
    plan = tree_install.plan(g, b.treeset, b.job, slot_base=b.slot_base, reply_ports={}, slots=b.slots,
                             ranks=b._ranks())
    lines = sorted(line for batch in plan.lines.values() for line in batch if line.startswith("table_add agg_job"))
    port = {h: g.edges[h, "s1"]["ports"]["s1"] for h in ("h2", "h4")}
    assert len(lines) == 2
    assert any(line.startswith(f"table_add agg_job agg_child 6 0 0 {port['h2']} => 0 2 ")
               and line.endswith(" 512 512 0") for line in lines), lines
    assert any(line.startswith(f"table_add agg_job agg_child 6 0 0 {port['h4']} => 1 2 ")
               and line.endswith(" 512 512 1") for line in lines), lines


def test_a_shared_jobs_reroute_reset_writes_only_its_window(tmp_path):
    _g, p, a, b = two_tenants(tmp_path, window=4)
    for line in b._reset_lines("s1"):
        verb, name, start, *values = line.split()
        assert verb == "register_write_range"
        start, end = int(start), int(start) + len(values)
        per = wire.K if name in ("agg_values", "sp_values") else wire.MAX_WORKERS if name in (
            "sp_next", "sp_exp_next") else 1
        slots = {(i // per) % wire.SLOTS for i in (start, end - 1)}
        assert all(512 <= s < 516 for s in slots), (name, start, end)
