"""The job table (p4src/include/job.p4): one agg_job lookup before the dense/sparse branch.

Why one table for both pipelines: the dense (aggregate.py) and the sparse (sparse.py)
pipeline ask the same question of a packet, namely which role this switch plays for
its (job, tree, epoch) on the ingress port, so the P4 program looks agg_job up once in
JobRole, makes the checks that keep a bad entry out of other jobs' slots, and only then
branches on AGG_FLAG_SPARSE. The software switch does the same here, with the same
table and action names; the controller installs one entry per tree port for both.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

from ground import wire
from softswitch.tables import KeySpec, Table

SLOTS, MAX_WORKERS = wire.SLOTS, wire.MAX_WORKERS
AGG_JOB = "agg_job"
AGG_CHILD, AGG_CHILD_OF, AGG_FROM_PARENT, AGG_REJECT = "agg_child", "agg_child_of", "agg_from_parent", "agg_reject"

JOB_KEYS = [KeySpec("hdr.agg.job", "exact", 8), KeySpec("hdr.agg.tree", "exact", 8),
            KeySpec("hdr.agg.epoch", "exact", 8), KeySpec("standard_metadata.ingress_port", "exact", 9)]

assert wire.FIELD_NAMES[:5] == ("job", "tree", "epoch", "flags", "ver")
_KEY = struct.Struct("!BBBBH")                   # job tree epoch flags ver|slot


def job_table() -> Table:
    """agg_job: child port of the root, child port of an inner switch, parent port."""
    return Table(
        AGG_JOB, JOB_KEYS,
        {AGG_CHILD: [("child", 8), ("fan_in", 8), ("mgrp", 16), ("slot_base", 16)],
         AGG_CHILD_OF: [("child", 8), ("fan_in", 8), ("mgrp", 16), ("slot_base", 16), ("parent_port", 9)],
         AGG_FROM_PARENT: [("fan_in", 8), ("mgrp", 16), ("slot_base", 16)],
         AGG_REJECT: []},
        default=AGG_REJECT, size=4096)


class JobEntry(NamedTuple):
    """One agg_job entry, in SwitchClient.table_add's argument order: `client.table_add(*entry)`."""
    table: str
    action: str
    key: tuple
    params: tuple

    def command(self) -> str:
        """The simple_switch_CLI line that adds it (both targets take it)."""
        return (f"table_add {self.table} {self.action} {' '.join(map(str, self.key))} => "
                f"{' '.join(map(str, self.params))}")


def job_entry(job: int, tree: int, epoch: int, port: int, *, fan_in: int, mgrp: int, slot_base: int = 0,
              child: int | None = None, parent_port: int | None = None) -> JobEntry:
    """The agg_job entry of one port of a switch for one (job, tree, epoch); the one place
    its format is written (controller trees and BML, the star and test harnesses use it).

    child=k: `port` leads to child k of this switch, at the tree's root (agg_child) or,
    with `parent_port`, at an inner switch (agg_child_of); child=None: `port` is the
    parent port, where the tree's result comes down (agg_from_parent). The header's
    epoch is 8 bits, so the key takes epoch & 0xFF.
    """
    key = (job, tree, epoch & 0xFF, port)
    if child is None:
        return JobEntry(AGG_JOB, AGG_FROM_PARENT, key, (fan_in, mgrp, slot_base))
    if parent_port is None:
        return JobEntry(AGG_JOB, AGG_CHILD, key, (child, fan_in, mgrp, slot_base))
    return JobEntry(AGG_JOB, AGG_CHILD_OF, key, (child, fan_in, mgrp, slot_base, parent_port))


def lookup_role(table: Table, port: int, frame: bytes):
    """JobRole for a valid agg packet: (child, fan_in, mgrp, parent, r, o, flags) or None
    where the P4 control rejects the packet (the caller counts STAT_REJECT).

    parent is -1 at the root, the parent port at an inner switch, None for a packet from
    the parent (which must carry RESULT); r/o index this and the other slot version.
    """
    job, tree, epoch, flags, vs = _KEY.unpack_from(frame, wire.AGG_OFFSET)
    action, params = table.exact.get((job, tree, epoch, port), table.default)
    if action == AGG_CHILD:
        c, fan_in, mgrp, slot_base = params
        parent = -1
    elif action == AGG_CHILD_OF:
        c, fan_in, mgrp, slot_base, parent = params
    elif action == AGG_FROM_PARENT:
        fan_in, mgrp, slot_base = params
        c, parent = 0, None
    else:
        return None
    idx = slot_base + (vs & 0x7FFF)
    if idx >= SLOTS or c >= MAX_WORKERS or (parent is None and not flags & wire.FLAG_RESULT):
        return None
    r, o = (idx + SLOTS, idx) if vs >> 15 else (idx, idx + SLOTS)
    return c, fan_in, mgrp, parent, r, o, flags
