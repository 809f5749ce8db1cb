"""A switch's role for one (job, tree, epoch) and ingress port: the agg_job / sp_job
tables of aggregate.p4 and sparse.p4 have the same keys, the same three actions and the
same reject checks, so both pipelines build and read them here.
"""

from __future__ import annotations

from ground import wire
from softswitch.tables import KeySpec, Table

SLOTS, MAX_WORKERS = wire.SLOTS, wire.MAX_WORKERS

JOB_KEYS = [KeySpec("hdr.agg.job", "exact", 8), KeySpec("hdr.agg.tree", "exact", 8),
            KeySpec("hdr.agg.epoch", "exact", 8), KeySpec("standard_metadata.ingress_port", "exact", 9)]


def job_table(name: str, child: str, child_of: str, from_parent: str, reject: str) -> Table:
    """agg_job or sp_job: child port of the root, child port of an inner switch, parent port."""
    return Table(
        name, JOB_KEYS,
        {child: [("child", 8), ("fan_in", 8), ("mgrp", 16), ("slot_base", 16)],
         child_of: [("child", 8), ("fan_in", 8), ("mgrp", 16), ("slot_base", 16), ("parent_port", 9)],
         from_parent: [("fan_in", 8), ("mgrp", 16), ("slot_base", 16)],
         reject: []},
        default=reject, size=4096)


def lookup_role(table: Table, key: tuple, vs: int, flags: int, child: str, child_of: str, from_parent: str):
    """(child, fan_in, mgrp, parent, r, o) or None where the P4 control rejects the packet.

    parent is -1 at the root, the parent port at an inner switch, None for a packet from
    the parent (which must carry RESULT); r/o index this and the other slot version.
    """
    action, params = table.exact.get(key, table.default)
    if action == child:
        c, fan_in, mgrp, slot_base = params
        parent = -1
    elif action == child_of:
        c, fan_in, mgrp, slot_base, parent = params
    elif action == from_parent:
        fan_in, mgrp, slot_base = params
        c, parent = 0, None
    else:
        return None
    idx = slot_base + (vs & 0x7FFF)
    if idx >= SLOTS or c >= MAX_WORKERS or (parent is None and not flags & wire.FLAG_RESULT):
        return None
    r, o = (idx + SLOTS, idx) if vs >> 15 else (idx, idx + SLOTS)
    return c, fan_in, mgrp, parent, r, o
