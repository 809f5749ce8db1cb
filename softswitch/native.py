"""The dense fast path in C (softswitch/fastdense.c), when it was built: `NativeDense`.

Why: at a frame per wake-up the switch spent about a third of its CPU in Python's per-frame
pipeline and a fifth in the Python glue and ctypes around its two system calls (py-spy,
docs/measurements.md 2026-12-06, fourth session); batch.py's numpy path only pays from a
dozen frames a batch. The C engine takes the common frame (a dense first contribution of a
child) straight from the receive arena into the registers and its output arena, and sends
the results with one sendmmsg per egress port; everything else (duplicates, other schemes,
control, the drop simulator, pcap) stays on the Python pipeline, which remains the
reference: tests/test_softswitch_native.py runs the same streams through both, bit-exact.

The extension is optional (setup.py): without a compiler `pip install .` still works and
`AVAILABLE` is False; AGGLAB_NATIVE=0 turns it off where it was built (the bench's "before").
`describe()` is the one line the switch logs at start.
"""

from __future__ import annotations

import os

from agglab.ground import wire
from agglab.softswitch.aggregate import AGG_SET_DST, STAT_COMPLETE, STAT_CONTRIB
from agglab.softswitch.roles import ANY_WORKER, child_entry

try:
    from agglab.softswitch import _fastdense
    _WHY_NOT = ""
except ImportError as exc:                 # not built (no compiler at install time)
    _fastdense = None
    _WHY_NOT = f"the C fast path is not built ({exc})"

AVAILABLE = _fastdense is not None
recvmmsg = _fastdense.recvmmsg if AVAILABLE else None   # (fd, MsgBatch._hdr_at, count) -> n
OUT_CAP = 1024                              # output frames staged before a send
REGISTERS = ("agg_values", "agg_bitmap", "agg_count", "agg_exp", "agg_final", "agg_block", "agg_rnext")


def enabled() -> bool:
    """Built and not turned off with AGGLAB_NATIVE=0."""
    return AVAILABLE and os.environ.get("AGGLAB_NATIVE", "1") != "0"


def describe() -> str:
    if enabled():
        return "data path: native C for dense first contributions (agglab.softswitch._fastdense), Python for the rest"
    why = "AGGLAB_NATIVE=0" if AVAILABLE else _WHY_NOT
    return f"data path: the Python reference pipeline ({why})"


class NativeDense:
    """The C engine over one pipeline's registers; `context` is the per-call table lookup."""

    def __init__(self, pipeline, other_flags: int):
        p = pipeline
        regs = p.register_arrays
        consts = (wire.K, wire.SLOTS, wire.MAX_WORKERS, wire.FRAME_BYTES, wire.AGG_OFFSET, wire.UDP_PORT,
                  wire.CONST["AGG_FLAG_LEAD"], wire.FLAG_RESULT, STAT_CONTRIB, STAT_COMPLETE)
        self.engine = _fastdense.Engine(tuple(regs[n].data for n in REGISTERS), (p.stats.packets, p.stats.bytes),
                                        tuple(p.sparse._rearmed), p.sparse.next_cells, consts, OUT_CAP)
        self.other_flags = other_flags
        self.agg_job, self.mc, self.agg_reply = p.agg_job, p.mc, p.aggregate.agg_reply
        self.drop_sim = p.drop_sim
        self.pipeline = p
        self._ctx: dict[tuple, tuple] = {}
        self._fast: dict[tuple, tuple | None] = {}     # (iport, job, tree, epoch) -> ctx, this generation
        self._gen = -1

    def _armed(self) -> bool:
        """The drop simulator may drop: its draws stay in the Python pipeline's order."""
        for t in (self.drop_sim.ingress_table, self.drop_sim.egress_table):
            if t.exact or t.default[0] != "NoAction":
                return True
        return False

    def context(self, iport: int, job: int, tree: int, epoch: int):
        """`lookup`, cached until the pipeline's next command (Pipeline.generation): every
        table and group change is a command, so the cache is as fresh as the tables."""
        gen = self.pipeline.generation
        if gen != self._gen:
            self._fast.clear()
            self._gen = gen
        key = (iport, job, tree, epoch)
        try:
            return self._fast[key]
        except KeyError:
            if len(self._fast) > 4096:              # foreign frames' random bytes
                self._fast.clear()
            ctx = self._fast[key] = self.lookup(iport, job, tree, epoch)
            return ctx

    def lookup(self, iport: int, job: int, tree: int, epoch: int):
        """The engine's ctx for frames of (job, tree, epoch) on `iport`, or None when they are
        not the dense path's (no child entry, the drop simulator armed). Cached per the
        entry, the replication and the agg_reply actions it reads (a table change is a new key)."""
        if self._armed():
            return None
        entry = child_entry(self.agg_job, job, tree, epoch, iport)
        if entry is None:
            return None
        c, fan_in, mgrp, slot_base, slots, want, parent = entry
        if c >= wire.MAX_WORKERS:
            return None
        if parent < 0:
            table = self.agg_reply
            replicas = self.mc.replicate(mgrp) if mgrp else ((0, 0),)
            actions = tuple(table.exact.get((port,), table.default) for port, _rid in replicas)
        else:
            replicas = actions = ()
        key = (iport, job, tree, epoch, entry, replicas, actions)
        ctx = self._ctx.get(key)
        if ctx is None:
            dsts = b"".join(port.to_bytes(2, "big") + dmac.to_bytes(6, "big") + smac.to_bytes(6, "big")
                            + sip.to_bytes(4, "big") + dip.to_bytes(4, "big")
                            for (port, _rid), (act, prm) in zip(replicas, actions) if act == AGG_SET_DST
                            for smac, sip, dmac, dip in (prm,))
            if len(dsts) // 22 > 64:
                return None                 # more replicas than the engine takes
            if len(self._ctx) > 1024:
                self._ctx.clear()
            ctx = self._ctx[key] = (job, tree, epoch, self.other_flags, c, fan_in, parent, slot_base, slots,
                                    -1 if want == ANY_WORKER else want, dsts)
        return ctx

    def run(self, iport: int, arena, stride: int, lens, start: int, n: int) -> tuple[int, int]:
        """Frames start.. of the arena through the engine while they are its own: (taken,
        drops); 0 taken: frame `start` is the Python pipeline's. Outputs wait in the engine
        (`engine.send()` or `engine.take()`); a full output arena is the caller's to empty."""
        off = start * stride + wire.AGG_OFFSET
        ctx = self.context(iport, arena[off], arena[off + 1], arena[off + 2])
        if ctx is None:
            return 0, 0
        return self.engine.run(arena, stride, lens, start, n, ctx)
