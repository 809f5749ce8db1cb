"""Block-sparse aggregation (p4src/include/sparse.p4), OmniReduce-style.

Packets flagged AGG_FLAG_SPARSE take this path instead of agglab.softswitch.aggregate;
the semantics are docs/design/sparse.md's "Sparse pipeline", step for step with the
P4 (the same agg_job entry, looked up once by the pipeline for both paths in
roles.py; registers sp_*).  A block m is complete once m is below the minimum of the
next blocks the switch's children announced: nobody will send for m any more.

Why memoryviews: the per-slot scalars (block, bitmap, done, ...) and the
per-child next/exponent cells are read and written a few times per packet;
indexing a memoryview of the register's numpy array yields a Python int
faster than `.item` and writes in place, so the CLI (register_read/write) and
the packet path share the same storage.  The min over the children is one
`min` over a memoryview slice; the K lanes are one numpy add, as in the dense
path.  Children >= fan_in are not looked at (the P4 counts them as
AGG_NEXT_NONE), so stale cells of unused children never hold the min down.
"""

from __future__ import annotations

import struct

import numpy as np

from agglab.ground import wire
from agglab.softswitch.aggregate import (BE_U32, DATA_OFF, FLAGS_OFF, STAT_COMPLETE, STAT_CONTRIB, STAT_DUP_DROP,
                                  STAT_DUP_REPLY, STAT_DUP_UP, UDP_CSUM, emit)
from agglab.softswitch.forward import NORMAL, RESULT
from agglab.softswitch.registers import CounterArray, RegisterArray
from agglab.softswitch.roles import ANY_WORKER, child_entry

K, SLOTS, MAX_WORKERS, NONE = wire.K, wire.SLOTS, wire.MAX_WORKERS, wire.NEXT_NONE
FLAG_RESULT = wire.FLAG_RESULT
FLAG_SPARSE = wire.CONST["AGG_FLAG_SPARSE"]
FLAG_ACK = wire.CONST["AGG_FLAG_ACK"]
FLAG_LEAD = wire.CONST["AGG_FLAG_LEAD"]
STAT_SP_HOLD = wire.CONST["STAT_SP_HOLD"]
assert wire.FIELD_NAMES == ("job", "tree", "epoch", "flags", "ver", "slot", "worker", "exp",
                            "block", "next_block")
_TAIL = struct.Struct("!BII")            # exp block next_block
_NEXT = struct.Struct("!I")
EXP_OFF = wire.AGG_OFFSET + 7
NEXT_OFF = wire.AGG_OFFSET + 12
AGG_OFF = wire.AGG_OFFSET                 # job, tree, epoch: agg_job's key with the port

# name -> (width, size); the order is sparse.p4's
REGISTERS = {
    "sp_values": (32, 2 * SLOTS * K), "sp_block": (32, 2 * SLOTS), "sp_bitmap": (32, 2 * SLOTS),
    "sp_final": (8, 2 * SLOTS), "sp_exp": (8, 2 * SLOTS), "sp_rnext": (32, 2 * SLOTS),
    "sp_done": (8, 2 * SLOTS), "sp_ack": (32, 2 * SLOTS), "sp_held": (16, 2 * SLOTS),
    "sp_next": (32, SLOTS * MAX_WORKERS),
    "sp_exp_next": (8, SLOTS * MAX_WORKERS),
}


def make_state() -> dict[str, RegisterArray]:
    """The top-level sp_ registers of sparse.p4 (all zero, as BMv2 starts)."""
    return {name: RegisterArray(name, width, size) for name, (width, size) in REGISTERS.items()}


def _emit(frame: bytes, lanes, e: int, n: int, flags: int) -> bytearray:
    """aggregate.emit, plus the round's next block n."""
    buf = emit(frame, lanes, e, flags)
    _NEXT.pack_into(buf, NEXT_OFF, n)
    return buf


class Sparse:
    def __init__(self, registers: dict[str, RegisterArray], stats: CounterArray):
        self.values = registers["sp_values"].data
        mv = {name: memoryview(registers[name].data) for name in REGISTERS if name != "sp_values"}
        self.block, self.bitmap, self.final = mv["sp_block"], mv["sp_bitmap"], mv["sp_final"]
        self.exp, self.rnext, self.done = mv["sp_exp"], mv["sp_rnext"], mv["sp_done"]
        self.ack, self.held = mv["sp_ack"], mv["sp_held"]
        self.next, self.exp_next = mv["sp_next"], mv["sp_exp_next"]
        self.next_cells = registers["sp_next"].data
        self._rearmed = [registers[name].data for name in ("sp_block", "sp_bitmap", "sp_ack", "sp_done",
                                                            "sp_final")]
        self.stats = stats
        self.agg_job = None                    # the pipeline's agg_job (schemes/omnireduce.py)

    def rearm(self, r: int, o: int, flags: int = 0) -> None:
        """sparse.p4's SparseRearm: a dense round (a sparse call's lead round) completed on
        this slot, so every child is past any earlier call: forget its held rounds and
        announcements (as a register reset), or the last call's AGG_NEXT_NONE announcements
        would complete the next call's first round with one contribution.  A sparse lead
        (AGG_FLAG_LEAD) keeps the announcements: its children just registered their first
        blocks (announce)."""
        for v in (r, o):
            self.block[v] = self.bitmap[v] = self.ack[v] = self.done[v] = self.final[v] = 0
        if not flags & FLAG_LEAD:
            cb = (r % SLOTS) * MAX_WORKERS
            self.next_cells[cb:cb + MAX_WORKERS] = 0

    def announce(self, r: int, child: int, nxt: int, e: int) -> None:
        """A child's first copy of a sparse lead: its first sparse block of the column and
        that block's exponent, as a sparse packet's next_block/exp (aggregate.p4)."""
        cb = (r % SLOTS) * MAX_WORKERS
        self.next[cb + child] = nxt
        self.exp_next[cb + child] = e

    def first(self, r: int, fan_in: int) -> tuple[int, int]:
        """A sparse lead completed: (n, e) = the column's first sparse round (the min of the
        children's announcements) and its exponent (the max of those who announced n)."""
        cb = (r % SLOTS) * MAX_WORKERS
        end = cb + (fan_in if fan_in < MAX_WORKERS else MAX_WORKERS)
        nexts = self.next[cb:end]
        n = min(nexts) if end > cb else NONE
        exps = self.exp_next[cb:end]
        return n, max((exps[i] for i, nx in enumerate(nexts) if nx == n), default=0)

    def rearm_many(self, r, o) -> None:
        """`rearm` for arrays of slot versions of distinct slots (softswitch/batch.py)."""
        for arr in self._rearmed:
            arr[r] = 0
            arr[o] = 0
        self.next_cells.reshape(SLOTS, MAX_WORKERS)[r % SLOTS] = 0

    def ingress(self, port: int, frame: bytes, role: tuple):
        """One sparse agg packet whose agg_job `role` (roles.lookup_role) was found;
        (frame, egress_spec, mcast_grp, kind) or None = drop."""
        child, fan_in, mgrp, parent, r, o, flags = role
        pexp, m, pnext = _TAIL.unpack_from(frame, EXP_OFF)
        every = (1 << fan_in) - 1 if fan_in < MAX_WORKERS else 0xFFFFFFFF
        if parent is None:
            return self._from_parent(frame, r, m, mgrp, flags, pexp, pnext, every)
        block, bitmap, acks = self.block, self.bitmap, self.ack
        bm, blk = bitmap[r], block[r]
        if bm and blk > m:                                # stale: touches nothing
            self.stats.count(STAT_SP_HOLD, len(frame))
            return None
        bit = 1 << child
        # a packet for block m: its sender is done with every round below m (an ACK: and m)
        if bitmap[o] and block[o] < m:
            acks[o] |= bit
        ack = acks[r]
        is_ack = flags & FLAG_ACK
        if bm and (blk < m or (is_ack and blk == m)):
            ack |= bit
            acks[r] = ack
        if is_ack:
            if parent >= 0 and bm and blk == m and self.final[r] == 1 and ack == every:
                buf = bytearray(frame)                    # the whole subtree is done: up
                buf[FLAGS_OFF] = flags & ~FLAG_RESULT & 0xFF
                buf[UDP_CSUM] = buf[UDP_CSUM + 1] = 0
                return buf, parent, 0, NORMAL
            held = self.held[r]
            if parent < 0 and bm and blk == m and ack == every and held:
                # The last child done with the held round, after a worker's new round was
                # held back for it: the ACK goes to that worker as a release (RESULT|ACK, no
                # values), so it sends again now instead of after its timeout.
                self.held[r] = 0
                buf = bytearray(frame)
                buf[FLAGS_OFF] = (flags | FLAG_RESULT) & 0xFF
                buf[UDP_CSUM] = buf[UDP_CSUM + 1] = 0
                return buf, held - 1, 0, RESULT
            return None
        new_round = bm == 0 or blk != m
        if new_round:
            if bm and ack != every:                       # a child still needs the held round
                if self._worker_port(port, frame):         # at the root, its ACK releases it
                    self.held[r] = port + 1
                self.stats.count(STAT_SP_HOLD, len(frame))
                return None
            block[r] = m
            self.done[r] = self.final[r] = self.held[r] = 0
            acks[r] = 0
            bm = 0
        lo = r * K
        if bm & bit or (parent >= 0 and self.final[r] == 1):
            return self._duplicate(port, frame, r, lo, parent, flags)
        bitmap[r] = bm | bit
        lanes = self.values[lo:lo + K]
        pkt = np.frombuffer(frame, BE_U32, K, DATA_OFF)
        if new_round:
            lanes[:] = pkt
        else:
            np.add(lanes, pkt, out=lanes)                 # uint32: wraps like bit<32>
        cb = (r % SLOTS) * MAX_WORKERS                # per-child cells of this slot
        self.next[cb + child] = pnext
        self.exp_next[cb + child] = pexp
        self.stats.count(STAT_CONTRIB, len(frame))
        if self.done[r]:
            # A probe after completion (its sender had nothing for the round): answered as a
            # duplicate, the round's next/exp as they were, to its own port (or up for the
            # result), never multicast again: at 128 workers with random blocks a root
            # multicast per late probe put the whole result on every downlink once more.
            return self._duplicate(port, frame, r, lo, parent, flags)
        else:
            # EXERCISE sparse-min-next BEGIN hint: n = the minimum next block announced by the fan_in children (self.next[cb:cb+fan_in], NONE if none); block m completes only if m < n (else return None); e = max exponent of the children that announced n
            end = cb + (fan_in if fan_in < MAX_WORKERS else MAX_WORKERS)
            nexts = self.next[cb:end]
            n = min(nexts) if end > cb else NONE
            if m >= n:
                return None
            exps = self.exp_next[cb:end]
            e = max((exps[i] for i, nx in enumerate(nexts) if nx == n), default=0)
            # EXERCISE END
        self.rnext[r] = n
        self.exp[r] = e
        self.done[r] = 1
        self.stats.count(STAT_COMPLETE, len(frame))
        if parent < 0:
            self.final[r] = 1
            return _emit(frame, lanes, e, n, flags | FLAG_RESULT), 0, mgrp, RESULT
        return _emit(frame, lanes, e, n, flags & ~FLAG_RESULT & 0xFF), parent, 0, NORMAL

    def _worker_port(self, port: int, frame: bytes) -> bool:
        """The agg_job entry of `port` names a worker (P4: meta.worker != AGG_ANY_WORKER): a
        release may go there (a child switch takes only results with values from its parent)."""
        entry = child_entry(self.agg_job, *frame[AGG_OFF:AGG_OFF + 3], port) if self.agg_job else None
        return entry is not None and entry[5] != ANY_WORKER

    def _duplicate(self, port, frame, r, lo, parent, flags):
        """The child already contributed to this round: answer once the block is done here."""
        if not self.done[r]:
            self.stats.count(STAT_DUP_DROP, len(frame))
            return None
        lanes = self.values[lo:lo + K]
        e, n = self.exp[r], self.rnext[r]
        if parent < 0 or self.final[r] == 1:
            self.stats.count(STAT_DUP_REPLY, len(frame))
            return _emit(frame, lanes, e, n, flags | FLAG_RESULT), port, 0, RESULT
        self.stats.count(STAT_DUP_UP, len(frame))         # our partial may be lost: again
        return _emit(frame, lanes, e, n, flags & ~FLAG_RESULT & 0xFF), parent, 0, NORMAL

    def _from_parent(self, frame, r, m, mgrp, flags, pexp, pnext, every):
        """The tree's result coming down: kept (for duplicates) and multicast, if this
        version holds round m, or adopted if its held round is older and every child is
        done with it (the subtree had no data for m); otherwise stale or held back."""
        bm, blk = self.bitmap[r], self.block[r]
        if bm and blk == m and self.final[r]:
            # The result again (the parent answering a probe or a resend passed up): this switch
            # already multicast it, and a child that lost it gets it from here (_duplicate).
            self.stats.count(STAT_DUP_DROP, len(frame))
            return None
        if not (bm and blk == m):
            if not (blk < m and (bm == 0 or self.ack[r] == every)):
                self.stats.count(STAT_SP_HOLD, len(frame))
                return None
            self.block[r], self.bitmap[r], self.ack[r], self.done[r] = m, every, 0, 1
        pkt = np.frombuffer(frame, BE_U32, K, DATA_OFF)
        self.values[r * K:(r + 1) * K] = pkt
        self.exp[r] = pexp
        self.rnext[r] = pnext
        self.final[r] = 1
        buf = bytearray(frame)
        buf[UDP_CSUM] = buf[UDP_CSUM + 1] = 0
        return buf, 0, mgrp, RESULT
