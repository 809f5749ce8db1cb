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

from agglab.ground import wire
from agglab.softswitch.tables import KeySpec, Table

SLOTS, MAX_WORKERS = wire.SLOTS, wire.MAX_WORKERS
ANY_WORKER = wire.CONST["AGG_ANY_WORKER"]
AGG_JOB = "agg_job"
AGG_CHILD, AGG_CHILD_OF, AGG_FROM_PARENT, AGG_REJECT = "agg_child", "agg_child_of", "agg_from_parent", "agg_reject"

# Why a packet was rejected: the agg_rejects counter's indices (REJ_* in constants.p4), by name.
REJECTS = ("malformed", "length", "no_entry", "slot", "worker", "from_parent", "entry", "policed")
REJ_MALFORMED, REJ_LENGTH, REJ_NO_ENTRY, REJ_SLOT, REJ_WORKER, REJ_FROM_PARENT, REJ_ENTRY, REJ_POLICED = (
    wire.CONST["REJ_" + name.upper()] for name in REJECTS)
assert list(range(len(REJECTS))) == [REJ_MALFORMED, REJ_LENGTH, REJ_NO_ENTRY, REJ_SLOT, REJ_WORKER,
                                     REJ_FROM_PARENT, REJ_ENTRY, REJ_POLICED]

JOB_KEYS = [KeySpec("hdr.agg.job", "exact", 8), KeySpec("hdr.agg.tree", "exact", 8),
            KeySpec("hdr.agg.epoch", "exact", 8), KeySpec("standard_metadata.ingress_port", "exact", 9)]

assert wire.FIELD_NAMES[:7] == ("job", "tree", "epoch", "flags", "ver", "slot", "worker")
_KEY = struct.Struct("!BBBBHB")                  # job tree epoch flags ver|slot worker
_LENGTHS = struct.Struct("!H")
IP_LEN_OFF = wire.ETH_BYTES + 2                  # ipv4.totalLen
UDP_LEN_OFF = wire.ETH_BYTES + wire.IPV4_BYTES + 4
ACK_UDP_LEN = wire.UDP_BYTES + wire.AGG_HEADER_BYTES          # agg_h only (a sparse ACK)
DATA_UDP_LEN = ACK_UDP_LEN + wire.DATA_BYTES                  # agg_h + K values
ACK_ONLY = wire.CONST["AGG_FLAG_ACK"] | wire.CONST["AGG_FLAG_SPARSE"]   # parser: no agg_data_h


def job_table() -> Table:
    """agg_job: child port of the root, child port of an inner switch, parent port."""
    return Table(
        AGG_JOB, JOB_KEYS,
        {AGG_CHILD: [("child", 8), ("fan_in", 8), ("mgrp", 16), ("slot_base", 16), ("slots", 16), ("worker", 16)],
         AGG_CHILD_OF: [("child", 8), ("fan_in", 8), ("mgrp", 16), ("slot_base", 16), ("slots", 16),
                        ("worker", 16), ("parent_port", 9)],
         AGG_FROM_PARENT: [("fan_in", 8), ("mgrp", 16), ("slot_base", 16), ("slots", 16)],
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
              slots: int | None = None, worker: int | None = None,
              child: int | None = None, parent_port: int | None = None) -> JobEntry:
    """The agg_job entry of one port of a switch for one (job, tree, epoch); the one place
    its format is written (controller trees and BML, the star and test harnesses use it).

    child=k: `port` leads to child k of this switch, at the tree's root (agg_child) or,
    with `parent_port`, at an inner switch (agg_child_of); child=None: `port` is the
    parent port, where the tree's result comes down (agg_from_parent). The header's
    epoch is 8 bits, so the key takes epoch & 0xFF.

    The job owns slots slot_base .. slot_base + slots - 1 (default: every slot from
    slot_base on); a packet with a larger slot is rejected, so jobs sharing a switch
    never touch each other's slots. worker=w: the port leads to worker rank w and its
    packets must say so in their worker field (a forged rank is rejected); None: any
    (a port that leads to a switch, whose partials keep whatever worker field they had).
    """
    key = (job, tree, epoch & 0xFF, port)
    slots = SLOTS - slot_base if slots is None else slots
    if child is None:
        return JobEntry(AGG_JOB, AGG_FROM_PARENT, key, (fan_in, mgrp, slot_base, slots))
    worker = ANY_WORKER if worker is None else worker
    if parent_port is None:
        return JobEntry(AGG_JOB, AGG_CHILD, key, (child, fan_in, mgrp, slot_base, slots, worker))
    return JobEntry(AGG_JOB, AGG_CHILD_OF, key, (child, fan_in, mgrp, slot_base, slots, worker, parent_port))


def lookup_role(table: Table, port: int, frame: bytes):
    """JobRole for a valid agg packet: (child, fan_in, mgrp, parent, r, o, flags), or, where
    the P4 control rejects the packet, the reason (REJ_*; the caller counts STAT_REJECT and
    agg_rejects[reason]).

    parent is -1 at the root, the parent port at an inner switch, None for a packet from
    the parent (which must carry RESULT); r/o index this and the other slot version.
    """
    job, tree, epoch, flags, vs, worker = _KEY.unpack_from(frame, wire.AGG_OFFSET)
    ip_len, = _LENGTHS.unpack_from(frame, IP_LEN_OFF)
    udp_len, = _LENGTHS.unpack_from(frame, UDP_LEN_OFF)
    if (ip_len != (udp_len + wire.IPV4_BYTES) & 0xFFFF or udp_len > 0xFFFF - wire.IPV4_BYTES   # bit<16> sum
            or udp_len < ACK_UDP_LEN
            or (udp_len < DATA_UDP_LEN and flags & ACK_ONLY != ACK_ONLY)    # agg_data_h valid
            or ip_len + wire.ETH_BYTES > len(frame)):
        return REJ_LENGTH
    action, params = table.exact.get((job, tree, epoch, port), table.default)
    if action == AGG_CHILD:
        c, fan_in, mgrp, slot_base, slots, want = params
        parent = -1
    elif action == AGG_CHILD_OF:
        c, fan_in, mgrp, slot_base, slots, want, parent = params
    elif action == AGG_FROM_PARENT:
        fan_in, mgrp, slot_base, slots = params
        c, parent, want = 0, None, ANY_WORKER
    else:
        return REJ_NO_ENTRY
    slot = vs & 0x7FFF
    idx = slot_base + slot
    if slot >= slots or idx >= SLOTS:
        return REJ_SLOT
    if want != ANY_WORKER and worker != want:
        return REJ_WORKER
    if c >= MAX_WORKERS:
        return REJ_ENTRY
    if parent is None and (not flags & wire.FLAG_RESULT or flags & ACK_ONLY == ACK_ONLY):
        return REJ_FROM_PARENT                    # only results, with their values, come down
    r, o = (idx + SLOTS, idx) if vs >> 15 else (idx, idx + SLOTS)
    return c, fan_in, mgrp, parent, r, o, flags


def child_entry(agg_job, job: int, tree: int, epoch: int, iport: int):
    """The agg_job entry of a child's frame as (c, fan_in, mgrp, slot_base, slots, want, parent),
    parent -1 for the root's children; None when the entry is not a child's (from the parent, a
    reject). One reading of the table for both fast paths (softswitch/batch.py, native.py)."""
    action, params = agg_job.exact.get((job, tree, epoch, iport), agg_job.default)
    if action == AGG_CHILD:
        return (*params, -1)
    if action == AGG_CHILD_OF:
        return tuple(params)
    return None
