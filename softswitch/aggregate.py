"""SwitchML aggregation (p4src/include/aggregate.p4), the per-packet hot path.

The semantics are docs/design/'s pseudo-code ("Aggregation semantics",
"Aggregation trees"), line for line with the P4; the software switch is
single-threaded, so the P4's @atomic block is simply a method body.  The
agg_job entry of the ingress port (softswitch/roles.py, looked up once by the
pipeline for both the dense and the sparse path) picks the role: tree root
(agg_child), inner switch (agg_child_of: a complete partial goes up to the
parent port) or result coming down from the parent (agg_from_parent).

Speed comes from reading the agg_h fields at fixed offsets, an exact-match
dict lookup (roles.py), Python ints for the per-slot scalars
(`.item`) and one numpy add over the K lanes, done on a big-endian view of
the frame so no values are copied before the add.  Results are built once
per completion and then patched per egress port by `reply` (agg_reply).
"""

from __future__ import annotations

import numpy as np

from agglab.ground import wire
from agglab.softswitch.deparser import update_ipv4_checksum
from agglab.softswitch.forward import NORMAL, RESULT
from agglab.softswitch.registers import CounterArray, RegisterArray
from agglab.softswitch.tables import KeySpec, Table

K, SLOTS, MAX_WORKERS = wire.K, wire.SLOTS, wire.MAX_WORKERS
C = wire.CONST
STAT_CONTRIB, STAT_COMPLETE = C["STAT_CONTRIB"], C["STAT_COMPLETE"]
STAT_DUP_DROP, STAT_DUP_REPLY, STAT_REJECT = C["STAT_DUP_DROP"], C["STAT_DUP_REPLY"], C["STAT_REJECT"]
STAT_DUP_UP = C["STAT_DUP_UP"]

# The offsets below assume this agg_h layout; fail at import if headers.p4 changes it.
assert wire.FIELD_NAMES[:9] == ("job", "tree", "epoch", "flags", "ver", "slot", "worker", "exp", "block")
FLAGS_OFF = wire.AGG_OFFSET + 3
EXP_OFF = wire.AGG_OFFSET + 7
BLOCK_OFF = wire.AGG_OFFSET + 8
NEXT_OFF = wire.AGG_OFFSET + 12
assert wire.FIELD_NAMES[9] == "next_block"
FLAG_LEAD = C["AGG_FLAG_LEAD"]
DATA_OFF = wire.AGG_OFFSET + wire.AGG_HEADER_BYTES
DATA_END = DATA_OFF + wire.DATA_BYTES
UDP_CSUM = wire.ETH_BYTES + wire.IPV4_BYTES + 6
BE_U32 = np.dtype(">u4")
AGG_SET_DST = "agg_set_dst"
RESULT_FLAG = wire.FLAG_RESULT
UP_FLAGS = ~wire.FLAG_RESULT & 0xFF                # send_up clears RESULT


def emit(frame: bytes, lanes: np.ndarray, e: int, flags: int) -> bytearray:
    """The packet leaving with `lanes`, exponent e and `flags`: RESULT set for a result
    (AggOut's mark_result), clear for a partial going up (send_up); UDP checksum 0 either
    way, since the payload changed. Shared with the sparse pipeline."""
    buf = bytearray(frame)
    buf[DATA_OFF:DATA_END] = lanes.astype(BE_U32).tobytes()
    buf[FLAGS_OFF] = flags
    buf[EXP_OFF] = e
    buf[UDP_CSUM] = buf[UDP_CSUM + 1] = 0
    return buf


def make_state() -> tuple[dict[str, RegisterArray], CounterArray]:
    """The top-level registers and the agg_stats counter of aggregate.p4."""
    regs = [RegisterArray("agg_values", 32, 2 * SLOTS * K), RegisterArray("agg_bitmap", 32, 2 * SLOTS),
            RegisterArray("agg_count", 8, 2 * SLOTS), RegisterArray("agg_exp", 8, 2 * SLOTS),
            RegisterArray("agg_final", 8, 2 * SLOTS), RegisterArray("agg_block", 32, 2 * SLOTS),
            RegisterArray("agg_rnext", 32, 2 * SLOTS)]
    return {r.name: r for r in regs}, CounterArray("agg_stats", C["AGG_STATS_SIZE"])


def _next_of(frame) -> int:
    return int.from_bytes(frame[NEXT_OFF:NEXT_OFF + 4], "big")


class Aggregate:
    def __init__(self, registers: dict[str, RegisterArray], stats: CounterArray, on_complete=None,
                 lead=None):
        """on_complete(r, o, flags): called when a round completes at this switch (agglab.p4
        then applies the sparse pipeline's SparseRearm: agglab.softswitch.sparse.Sparse.rearm).
        lead: the sparse pipeline (agglab.softswitch.sparse.Sparse), whose announce/first a sparse
        call's lead round (AGG_FLAG_LEAD) uses to register every child's first sparse block
        and to name the column's first sparse round in the result."""
        self.on_complete = on_complete
        self.lead = lead
        self.agg_reply = Table(
            "agg_reply", [KeySpec("standard_metadata.egress_port", "exact", 9)],
            {AGG_SET_DST: [("smac", 48), ("sip", 32), ("dmac", 48), ("dip", 32)], "drop": []},
            default="drop", size=512)
        self.values = registers["agg_values"].data
        self.bitmap = registers["agg_bitmap"].data
        self.count = registers["agg_count"].data
        self.exp = registers["agg_exp"].data
        self.final = registers["agg_final"].data
        self.block = registers["agg_block"].data
        self.rnext = registers["agg_rnext"].data
        self.stats = stats
        self._dst_bytes: dict[tuple, tuple[bytes, bytes]] = {}

    def ingress(self, port: int, frame: bytes, role: tuple):
        """Aggregate one agg packet whose agg_job `role` (roles.lookup_role) was found;
        (frame, egress_spec, mcast_grp, kind) or None = drop."""
        child, fan_in, mgrp, parent, r, o, flags = role
        pexp = frame[EXP_OFF]
        if parent is None:
            return self._from_parent(frame, r, fan_in, mgrp, flags, pexp)
        first = not self.bitmap.item(r) >> child & 1
        lead = flags & FLAG_LEAD and self.lead is not None
        if first and lead:                                # a sparse lead: the child's first block
            self.lead.announce(r, child, _next_of(frame), pexp)
        out = self._contribute(port, frame, r, o, 1 << child, fan_in, mgrp, parent, flags, pexp)
        if out is None:
            return None
        if first:                                         # completed here: the result's next
            if lead:                                      # the column's first sparse round
                n, e = self.lead.first(r, fan_in)
                self.exp[r] = out[0][EXP_OFF] = e
            else:
                n = _next_of(frame)
            self.rnext[r] = n
        out[0][NEXT_OFF:NEXT_OFF + 4] = self.rnext.item(r).to_bytes(4, "big")   # and duplicates'
        return out

    def _contribute(self, port, frame, r, o, bit, fan_in, mgrp, parent, flags, pexp):
        """A child's packet at the root (parent < 0) or at an inner switch."""
        bitmap = self.bitmap
        bm = bitmap.item(r)
        lo = r * K
        if not bm & bit:                                  # first copy
            if bm == 0:                                   # a round starts: which one (the reroute carry reads it)
                self.block[r] = int.from_bytes(frame[BLOCK_OFF:BLOCK_OFF + 4], "big")
            obm = bitmap.item(o)
            # EXERCISE shadow-copy BEGIN hint: the child's packet of version r proves it received the result of the other version o; clear its bit in bitmap[o] so that version's slot can be reused
            if obm & bit:
                bitmap[o] = obm & ~bit                    # shadow copy: free the other version
            # EXERCISE END
            # EXERCISE aggregate-add BEGIN hint: first contribution (bm == 0) copies the lanes, later ones add them (np.add, out=lanes); keep the max exponent, count, set the child's bit; when count == fan_in: call self.on_complete(r, o, flags) if set (re-arms the sparse state), then the root multicasts a RESULT (final=1), an inner switch sends the partial up
            lanes = self.values[lo:lo + K]
            pkt = np.frombuffer(frame, BE_U32, K, DATA_OFF)
            if bm == 0:
                lanes[:] = pkt
                e, cnt = pexp, 1
                self.final[r] = 0                         # a round starts
            else:
                np.add(lanes, pkt, out=lanes)             # uint32: wraps like bit<32>
                e = max(self.exp.item(r), pexp)
                cnt = (self.count.item(r) + 1) & 0xFF
            self.exp[r] = e
            self.count[r] = cnt
            bitmap[r] = bm | bit
            self.stats.count(STAT_CONTRIB, len(frame))
            if cnt != fan_in:
                return None
            self.stats.count(STAT_COMPLETE, len(frame))
            if self.on_complete is not None:
                self.on_complete(r, o, flags)
            if parent < 0:
                self.final[r] = 1
                return emit(frame, lanes, e, flags | RESULT_FLAG), 0, mgrp, RESULT
            return emit(frame, lanes, e, flags & UP_FLAGS), parent, 0, NORMAL
            # EXERCISE END
        # EXERCISE aggregate-duplicate BEGIN hint: the child's bit is already set: before completion drop it (STAT_DUP_DROP); after completion answer the sender alone with the stored result (a lost result)
        if self.count.item(r) != fan_in:                  # duplicate before completion
            self.stats.count(STAT_DUP_DROP, len(frame))
            return None
        lanes = self.values[lo:lo + K]                    # duplicate after completion
        if parent < 0 or self.final.item(r) == 1:
            self.stats.count(STAT_DUP_REPLY, len(frame))
            return emit(frame, lanes, self.exp.item(r), flags | RESULT_FLAG), port, 0, RESULT
        self.stats.count(STAT_DUP_UP, len(frame))         # our partial may be lost: again
        return emit(frame, lanes, self.exp.item(r), flags & UP_FLAGS), parent, 0, NORMAL
        # EXERCISE END

    def _from_parent(self, frame, r, fan_in, mgrp, flags, pexp):
        """The tree's result coming down: store it (for retransmissions), multicast it."""
        if self.count.item(r) != fan_in:
            return None                                   # stale result
        pkt = np.frombuffer(frame, BE_U32, K, DATA_OFF)
        self.values[r * K:(r + 1) * K] = pkt
        self.exp[r] = pexp
        self.rnext[r] = _next_of(frame)
        self.final[r] = 1
        return emit(frame, pkt, pexp, flags | RESULT_FLAG), 0, mgrp, RESULT

    def reply(self, egress_port: int, buf: bytearray) -> bytes | None:
        """AggregateEgress for one replica of a result: agg_reply, then the IPv4 checksum."""
        table = self.agg_reply
        action, params = table.exact.get((egress_port,), table.default)
        if action != AGG_SET_DST:
            return None
        dst = self._dst_bytes.get(params)
        if dst is None:
            smac, sip, dmac, dip = params
            dst = self._dst_bytes[params] = (dmac.to_bytes(6, "big") + smac.to_bytes(6, "big"),
                                             sip.to_bytes(4, "big") + dip.to_bytes(4, "big"))
        out = bytearray(buf)
        out[0:12] = dst[0]
        out[26:34] = dst[1]
        update_ipv4_checksum(out)
        return bytes(out)
