"""A whole receive batch of dense aggregation packets in a few numpy calls (Pipeline.process_batch).

Why: the daemon receives up to 64 frames per port with one recvmmsg; running
Pipeline.process on each costs a few microseconds of Python per frame (object
creation, dict lookups, a dozen small numpy calls), which bounded the daemon
at ~100,000 frames/s. In the common case every frame of a batch is a dense
contribution of one child: they all come from the same ingress port, so they
share one agg_job entry, one role and one replication list.

When is vectorising exactly P4's per-packet semantics: the batch is one
ingress port's frames, each is the child's *first* copy for its slot version,
and no two frames use the same slot index (either version). Then every frame
touches only its own slot's registers: version r and the other version o of
frame i are never r or o of frame j, so running the frames "at once" leaves
the registers exactly as running them one after another does, and counters
are sums. Outputs keep the frames' order on every egress port. Anything else
(a duplicate or retransmission, two versions of one slot, a sparse, short,
rejected or non-aggregation frame, another role, the drop simulator armed)
and `run` returns None *before touching any state*: the caller then runs the
batch frame by frame through Pipeline.process. tests/test_softswitch_batch.py
checks both ways give the same frames, registers and counters.

What it does is aggregate.py's `_contribute` (first copy) followed by the
pipeline's replication and agg_reply (AggregateEgress) or, at an inner
switch, the IPv4 checksum of the partial going up; the IPv4 checksum of every
result is computed from a per-batch sum of the words agg_reply does not change
plus the port's addresses.
"""

from __future__ import annotations

import numpy as np

from agglab.ground import wire
from agglab.softswitch.aggregate import (AGG_SET_DST, BE_U32, BLOCK_OFF, DATA_END, DATA_OFF, EXP_OFF, FLAG_LEAD, FLAGS_OFF,
                                  NEXT_OFF,
                                  RESULT_FLAG, STAT_COMPLETE, STAT_CONTRIB, UDP_CSUM, UP_FLAGS)
from agglab.softswitch.roles import ANY_WORKER, child_entry

K, SLOTS, MAX_WORKERS = wire.K, wire.SLOTS, wire.MAX_WORKERS
FRAME = wire.FRAME_BYTES
AGG = wire.AGG_OFFSET
FLAG_SPARSE = wire.CONST["AGG_FLAG_SPARSE"]
DROP_PORT = 511
BE_U16 = np.dtype(">u2")
assert wire.FIELD_NAMES[:9] == ("job", "tree", "epoch", "flags", "ver", "slot", "worker", "exp", "block")
VS_OFF, WORKER_OFF = AGG + 4, AGG + 6
IP, IP_CSUM = wire.ETH_BYTES, wire.ETH_BYTES + 10
# Bytes every full-size dense agg frame of a batch shares: ethertype IPv4, IPv4 total length,
# protocol UDP, destination port, UDP length; then job, tree and epoch (taken from frame 0).
_FIXED_COLS = np.array([12, 13, 16, 17, 23, 36, 37, 38, 39, AGG, AGG + 1, AGG + 2])
_IP_LEN, _UDP_LEN = FRAME - wire.ETH_BYTES, FRAME - wire.ETH_BYTES - wire.IPV4_BYTES
_FIXED = np.array([0x08, 0x00, _IP_LEN >> 8, _IP_LEN & 0xFF, 17, wire.UDP_PORT >> 8, wire.UDP_PORT & 0xFF,
                   _UDP_LEN >> 8, _UDP_LEN & 0xFF, 0, 0, 0], dtype=np.uint8)
# ... and masked bytes: IHL 5 (the version nibble is not checked, as in parser.p4), and no
# flag of another scheme's branch (the pipeline's BRANCHES: DenseBatch's `other_flags`)
_MASK_COLS = np.array([IP, FLAGS_OFF])
_MASKED = np.array([5, 0], dtype=np.uint8)


def _fold(s: np.ndarray) -> np.ndarray:
    """One's-complement checksum of 32-bit word sums (deparser.ipv4_checksum, vectorised)."""
    s = (s & 0xFFFF) + (s >> 16)
    s = (s & 0xFFFF) + (s >> 16)
    return ~s & 0xFFFF


class DenseBatch:
    """Pipeline.process_batch: `run(port, rows, lens)` or None (see the module doc)."""

    def __init__(self, pipeline, other_flags: int = FLAG_SPARSE):
        """other_flags: the agg_h flags that select another branch than the dense one (the
        pipeline's BRANCHES); a frame with any of them is declined."""
        p = pipeline
        self._masks = np.array([0x0F, other_flags], dtype=np.uint8)
        self.agg_job, self.mc, self.drop_sim = p.agg_job, p.mc, p.drop_sim
        self.agg_reply = p.aggregate.agg_reply
        regs = p.register_arrays
        self.values = regs["agg_values"].data.reshape(2 * SLOTS, K)
        self.bitmap, self.count = regs["agg_bitmap"].data, regs["agg_count"].data
        self.exp, self.final = regs["agg_exp"].data, regs["agg_final"].data
        self.block = regs["agg_block"].data
        self.rnext = regs["agg_rnext"].data
        self.stats = p.stats
        self.rearm = p.sparse.rearm_many
        self._seen = np.zeros(SLOTS, dtype=np.int64)      # scratch of the distinct-slot test
        self._dst: dict[tuple, tuple] = {}                # see _replies

    def _replies(self, mgrp: int):
        """The replicas of a result that agg_reply keeps, in replication order: (ports, their
        MAC pairs (P, 12), IPv4 address pairs (P, 8), the addresses' checksum words summed (P,)),
        or None when a port comes twice. Cached per (replicas, agg_reply actions): a table or
        group change makes a new key."""
        table = self.agg_reply
        replicas = self.mc.replicate(mgrp) if mgrp else ((0, 0),)
        actions = tuple(table.exact.get((port,), table.default) for port, _rid in replicas)
        key = (replicas, actions)
        if key in self._dst:
            return self._dst[key]
        ports, macs, ips, extra = [], [], [], []
        for (port, _rid), (action, params) in zip(replicas, actions):
            if action != AGG_SET_DST:
                continue
            smac, sip, dmac, dip = params
            addr = sip.to_bytes(4, "big") + dip.to_bytes(4, "big")
            ports.append(port)
            macs.append(np.frombuffer(dmac.to_bytes(6, "big") + smac.to_bytes(6, "big"), np.uint8))
            ips.append(np.frombuffer(addr, np.uint8))
            extra.append(sum(int.from_bytes(addr[i:i + 2], "big") for i in range(0, 8, 2)))
        if len(self._dst) > 1024:
            self._dst.clear()
        # one port twice (two nodes of the group share it): frame after frame its copies
        # interleave, which the all-frames-per-replica layout would not; None = decline
        got = self._dst[key] = None if len(set(ports)) != len(ports) else (
            ports, np.array(macs, np.uint8).reshape(-1, 12), np.array(ips, np.uint8).reshape(-1, 8),
            np.array(extra, np.int64))
        return got

    def _armed(self) -> bool:
        """True when the drop simulator may drop (its draws must stay in per-packet order)."""
        for t in (self.drop_sim.ingress_table, self.drop_sim.egress_table):
            if t.exact or t.default[0] != "NoAction":
                return True
        return False

    def run(self, iport: int, rows: np.ndarray, lens: np.ndarray):
        """`rows`: uint8 (n, >= FRAME_BYTES), frame i in rows[i, :lens[i]], as received on
        `iport`. Returns (outputs, drops): outputs a list of (egress port, uint8 array
        (m, FRAME_BYTES) of frames in order), drops the number of frames that produced
        nothing; or None, with no state changed, when the batch needs the per-frame path."""
        n = len(rows)
        if n == 0 or self._armed() or not (lens == FRAME).all():
            return None
        hdr = rows[:, :DATA_OFF]
        fixed = _FIXED.copy()
        fixed[9:] = hdr[0, AGG:AGG + 3]
        if not ((hdr[:, _FIXED_COLS] == fixed).all() and ((hdr[:, _MASK_COLS] & self._masks) == _MASKED).all()):
            return None
        if (hdr[:, FLAGS_OFF] & FLAG_LEAD).any():
            return None                                   # a sparse lead registers the child's next
        job, tree, epoch = (int(v) for v in fixed[9:])
        entry = child_entry(self.agg_job, job, tree, epoch, iport)
        if entry is None:
            return None                                   # from the parent, or a reject
        c, fan_in, mgrp, slot_base, slots, want, parent = entry
        if c >= MAX_WORKERS or (want != ANY_WORKER and not (hdr[:, WORKER_OFF] == want).all()):
            return None
        vs = hdr[:, VS_OFF:VS_OFF + 2].view(BE_U16)[:, 0].astype(np.int64)
        slot = vs & 0x7FFF
        if not (slot < min(slots, SLOTS - slot_base)).all():
            return None
        idx = slot + slot_base
        seen, order = self._seen, np.arange(n)
        seen[idx] = order
        if not (seen[idx] == order).all():
            return None                                   # one slot index twice
        ver = vs >> 15
        r = idx + SLOTS * ver
        o = idx + SLOTS * (1 - ver)
        if parent < 0:
            replies = self._replies(mgrp)
            if replies is None:
                return None                               # a port twice among the replicas
        bit = 1 << c
        bitmap = self.bitmap
        bm = bitmap[r]
        if (bm & bit).any():
            return None                                   # a copy the child already sent
        # ---- from here on the batch is committed: aggregate.py's _contribute, first copy
        new = bm == 0
        if new.any():
            rn = r[new]
            self.block[rn] = rows[new, BLOCK_OFF:BLOCK_OFF + 4].view(BE_U32)[:, 0]
            self.final[rn] = 0
        bitmap[o] &= np.uint32(~bit & 0xFFFFFFFF)         # shadow copy: free the other version
        lanes = self.values[r]
        lanes[new] = 0
        lanes += rows[:, DATA_OFF:DATA_END].view(BE_U32)  # uint32: wraps like bit<32>
        self.values[r] = lanes
        e = self.exp[r]
        e[new] = 0
        e = np.maximum(e, hdr[:, EXP_OFF])
        cnt = self.count[r]
        cnt[new] = 0
        cnt += 1                                          # uint8: wraps like bit<8>
        self.exp[r] = e
        self.count[r] = cnt
        bitmap[r] = bm | bit
        stats = self.stats
        stats.packets[STAT_CONTRIB] += n
        stats.bytes[STAT_CONTRIB] += n * FRAME
        done = np.flatnonzero(cnt == fan_in)
        m = len(done)
        if m == 0:
            return [], n
        stats.packets[STAT_COMPLETE] += m
        stats.bytes[STAT_COMPLETE] += m * FRAME
        rc = r[done]
        self.rnext[rc] = rows[done, NEXT_OFF:NEXT_OFF + 4].view(BE_U32)[:, 0]   # duplicates answer it
        self.rearm(rc, o[done])
        out = rows[done, :FRAME]                          # a copy: the frames that completed
        out[:, DATA_OFF:DATA_END].view(BE_U32)[:] = lanes[done]
        out[:, EXP_OFF] = e[done]
        out[:, UDP_CSUM] = out[:, UDP_CSUM + 1] = 0
        words = out[:, IP:IP + 20].view(BE_U16).astype(np.int64)
        if parent >= 0:                                   # inner switch: the partial goes up
            out[:, FLAGS_OFF] &= UP_FLAGS
            if parent == DROP_PORT:
                return [], n
            s = words[:, :5].sum(axis=1) + words[:, 6:].sum(axis=1)
            out[:, IP_CSUM:IP_CSUM + 2].view(BE_U16)[:, 0] = _fold(s)
            return [(parent, out)], n - m
        self.final[rc] = 1                                # root: the result, to every child
        out[:, FLAGS_OFF] |= RESULT_FLAG
        ports, macs, ips, extra = replies
        if not ports:
            return [], n
        base = words[:, :5].sum(axis=1)                   # the words agg_reply leaves alone
        frames = np.empty((len(ports), m, FRAME), np.uint8)   # every replica at once
        frames[:] = out
        frames[:, :, 0:12] = macs[:, None, :]
        frames[:, :, 26:34] = ips[:, None, :]
        frames[:, :, IP_CSUM:IP_CSUM + 2].view(BE_U16)[:, :, 0] = _fold(base + extra[:, None])
        outs = list(zip(ports, frames))
        return outs, n - m
