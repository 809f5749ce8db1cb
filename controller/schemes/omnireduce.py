"""OmniReduce on the controller (`--algorithm omnireduce`): a tree job (controller/schemes/_tree.py);
a reroute carries every round some worker may still need, plus the dense carry of its lead
rounds (controller/reroute SparseCarry)."""

from __future__ import annotations

from agglab.controller.reroute.carry import SparseCarry
from agglab.controller.schemes._tree import tree_job as install

WIRE_MODEL = "sparse"


def carry(slot_base: int = 0):
    return SparseCarry(slot_base)


__all__ = ["WIRE_MODEL", "carry", "install"]
