"""The reroute one step after the other: where a switch's batches do not pipeline.

Why a path of its own: without a client that sends a batch before it reads the answers
(BMv2 without its Thrift modules: lines down a `simple_switch_CLI` pipe, answered in turn),
the rounds of bulk.py would not overlap the switches' work, so the reroute runs its steps in turn on every
switch: freeze, drain, snapshot, new trees, reset, install, preload, publish. BMv2's pipeline
threads can run a packet that matched an `agg_job` entry before its delete returned, hence
the drain (the job's `drain`) after the freeze.
"""

from __future__ import annotations

import time

from agglab.controller import tree_install
from agglab.controller.reroute.record import cause, partitioned, rerouted
from agglab.controller.slot_partition import partition_slots
from agglab.controller.trees.base import TreeError


def reroute_steps(job, link: str, t_detect: float, switch: str | None, t0: float) -> dict:
    """Reroute TreeJob `job` around the failed `link` (or dead `switch`) step by step;
    `t0`: the reroute's start. Returns the failure record."""
    record = cause(link, switch, t_detect)
    what = link if switch else f"link {link}"
    old = job.inst
    tree_install.freeze(job.clients, old)
    job._publish("rerouting", f"{what} failed")      # agents: a pause, not a stall
    phases = {"freeze_ms": time.monotonic() - t0}
    time.sleep(job.drain)                      # packets already in flight finish or miss
    ts = time.monotonic()
    carried = job.carry.snapshot(job.clients, old, job.tree_of_slot, down=job._down())
    t1 = time.monotonic()
    phases["snapshot_ms"] = t1 - ts
    try:
        new = job._compute(job._down_links(), job._next_epoch())
    except TreeError as exc:
        partitioned(job, what, exc, record, t1)
        return record
    t2 = time.monotonic()
    job.treeset = new
    job.tree_of_slot = partition_slots(new.weights, job.window)
    on_tree = sorted({sw for sw, _ in tree_install.roles_of(new, job.g)})
    job._reset(on_tree)
    ti = time.monotonic()
    job.inst = job._install(new)
    tp = time.monotonic()
    job._publish("rerouting", f"{what} failed")      # heartbeat before the preload
    writes = job.carry.preload(job.clients, job.inst, job.tree_of_slot, carried)
    phases.update(entries_ms=tp - ti, preload_ms=time.monotonic() - tp)
    job._publish()
    t3 = time.monotonic()
    tree_install.remove_groups(job.clients, old)      # after the agents were told: not urgent
    record.update(recompute_ms=round((t2 - t1) * 1e3, 2), install_ms=round((t3 - t2 + t1 - t0) * 1e3, 2))
    return rerouted(job, record, new, carried, writes, phases)
