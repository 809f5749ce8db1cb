"""design.md's sparse pipeline as a model switch on payloads, for the sparse agent's tests.

Why a model: the agent must be testable before (and independently of) the
software switch's implementation, and a model written straight from the
contract's text is a second reading of it: where the agent and
softswitch.Pipeline agree and this model agrees too, the contract is what both
implement.  One root switch, children 0..n-1, one job, slot_base 0; packets
without AGG_FLAG_SPARSE go to the dense ModelSwitch of tests/fakenet.py.

`after_epoch()` builds the switch of a new epoch the way the controller does:
fresh registers, every completed round (both pipelines) preloaded.

`every_child=True` is the loss-safe variant proposed for the contract: a round
completes only once every child sent (data or zero probe), as in the dense
pipeline, so a version is never reused while a worker may still need its
result; next/exp are then the min/max over that round's announcements.  The
agent's `every_round=True` goes with it.
"""

from __future__ import annotations

import numpy as np

from ground import wire
from fakenet import FakeNet, ModelSwitch, _get
from softswitch.star import star_commands
from hosts.protocol import LAYOUT

SPARSE = wire.CONST["AGG_FLAG_SPARSE"]
NONE = wire.NEXT_NONE
_H = wire.AGG_HEADER_BYTES


def result_payload(p: bytes, values: np.ndarray, exp: int, nxt: int) -> bytes:
    """`p` turned into a result: RESULT flag, the given values, exp and next_block."""
    words = list(wire.AGG_STRUCT.unpack_from(p))
    for name, value in (("flags", _get(p, "flags") | wire.FLAG_RESULT), ("exp", exp),
                        ("next_block", nxt)):
        word, shift, mask = LAYOUT[name]
        words[word] = (words[word] & ~(mask << shift)) | (value << shift)
    return wire.AGG_STRUCT.pack(*words) + values.astype(">i4").tobytes()


class SparseModelSwitch:
    """design.md "Sparse pipeline", root switch only (numbered steps as in the text)."""

    def __init__(self, n: int, dense: ModelSwitch | None = None, every_child: bool = False) -> None:
        self.n, self.dense, self.every_child = n, dense or ModelSwitch(n), every_child
        rows = 2 * wire.SLOTS
        self.values = np.zeros((rows, wire.K), np.int32)
        self.block, self.bitmap, self.done = [0] * rows, [0] * rows, [0] * rows
        self.exp, self.rnext = [0] * rows, [0] * rows
        self.next = [[0] * n for _ in range(wire.SLOTS)]        # sp_next, reset value 0
        self.exp_next = [[0] * n for _ in range(wire.SLOTS)]
        self.stats = {"contrib": 0, "complete": 0, "dup_reply": 0, "dup_drop": 0,
                      "new_round": 0, "done_overwritten": 0}

    def process(self, child: int, p: bytes) -> list[tuple[int | None, bytes]]:
        """(child, payload) deliveries; child None = multicast to all children."""
        if not _get(p, "flags") & SPARSE:
            return self.dense.process(child, p)
        slot, m = _get(p, "slot"), _get(p, "block")
        r, bit = _get(p, "ver") * wire.SLOTS + slot, 1 << child
        if self.block[r] != m or self.bitmap[r] == 0:                        # 1. new round
            self.stats["new_round"] += 1
            self.stats["done_overwritten"] += bool(self.bitmap[r] and self.done[r])
            self.block[r], self.bitmap[r], self.done[r] = m, 0, 0
            self.values[r] = 0
        if self.bitmap[r] & bit:                                              # 2. duplicate
            if self.done[r]:
                self.stats["dup_reply"] += 1
                return [(child, result_payload(p, self.values[r], self.exp[r], self.rnext[r]))]
            self.stats["dup_drop"] += 1
            return []
        self.bitmap[r] |= bit                                                 # 3. first copy
        self.values[r] += np.frombuffer(p, ">i4", wire.K, _H).astype(np.int32)   # wraps
        nexts, exps = self.next[slot], self.exp_next[slot]
        nexts[child], exps[child] = _get(p, "next_block"), _get(p, "exp")
        self.stats["contrib"] += 1
        if self.every_child and self.bitmap[r] != (1 << self.n) - 1:
            return []
        n = min(nexts)
        if not m < n:
            return []
        e = max(x for nx, x in zip(nexts, exps) if nx == n)
        self.done[r], self.rnext[r], self.exp[r] = 1, n, e
        self.stats["complete"] += 1
        return [(None, result_payload(p, self.values[r], e, n))]

    def after_epoch(self) -> "SparseModelSwitch":
        """The new epoch's switch: reset registers, completed rounds preloaded (design.md)."""
        dense = ModelSwitch(self.n)
        every = (1 << self.n) - 1
        for r, (count, bitmap) in enumerate(zip(self.dense.count, self.dense.bitmap)):
            if count == self.n and bitmap:
                dense.values[r], dense.exp[r] = self.dense.values[r], self.dense.exp[r]
                dense.count[r], dense.bitmap[r] = self.n, every
        new = SparseModelSwitch(self.n, dense, self.every_child)
        for r in newer_done_rounds(self.done, self.block):
            new.block[r], new.values[r], new.exp[r] = self.block[r], self.values[r], self.exp[r]
            new.rnext[r], new.bitmap[r], new.done[r] = self.rnext[r], every, 1
        return new


def newer_done_rounds(done, block) -> list[int]:
    """Per slot the completed version with the larger block (controller.sparse_failover's choice)."""
    out = []
    for slot in range(wire.SLOTS):
        rows = [r for r in (slot, wire.SLOTS + slot) if done[r]]
        if rows:
            out.append(max(rows, key=lambda r: block[r]))
    return out


def pipeline_after_epoch(old, n: int, epoch: int):
    """A fresh softswitch.Pipeline programmed for `epoch`, preloaded from `old` as above."""
    from softswitch.pipeline import Pipeline

    new = Pipeline()
    for cmd in star_commands(n, epoch=epoch):
        new.command(cmd)
    src, dst, every, K = old.registers, new.registers, (1 << n) - 1, wire.K
    for r in range(2 * wire.SLOTS):
        if src["agg_count"][r] == n and src["agg_bitmap"][r]:
            dst["agg_values"][r * K:(r + 1) * K] = src["agg_values"][r * K:(r + 1) * K]
            dst["agg_exp"][r], dst["agg_count"][r], dst["agg_bitmap"][r] = src["agg_exp"][r], n, every
            dst["agg_final"][r] = 1
    for r in newer_done_rounds(src["sp_done"], src["sp_block"]):
        dst["sp_values"][r * K:(r + 1) * K] = src["sp_values"][r * K:(r + 1) * K]
        for name in ("sp_block", "sp_exp", "sp_rnext"):
            dst[name][r] = src[name][r]
        dst["sp_bitmap"][r], dst["sp_done"][r], dst["sp_final"][r] = every, 1, 1
    return new


def sparse_net(n: int, backend: str = "model", **kwargs) -> FakeNet:
    """A FakeNet whose switch runs both pipelines: the model above ("model", or
    "model-every" for the every_child variant) or softswitch.Pipeline ("pipeline")."""
    if backend.startswith("model"):
        net = FakeNet(n, **kwargs)
        net.switch = SparseModelSwitch(n, every_child=backend == "model-every")
        return net
    from softswitch.pipeline import Pipeline

    pipeline = Pipeline(seed=kwargs.get("seed", 0))
    for cmd in star_commands(n):
        pipeline.command(cmd)
    return FakeNet(n, backend="pipeline", pipeline=pipeline, **kwargs)
