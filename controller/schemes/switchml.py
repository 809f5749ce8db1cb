"""SwitchML on the controller (`--algorithm switchml`): a tree job (controller/schemes/_tree.py);
a reroute carries each slot's version the old root completed (controller/reroute DenseCarry)."""

from __future__ import annotations

from agglab.controller.reroute.carry import DenseCarry
from agglab.controller.schemes._tree import tree_job as install

WIRE_MODEL = "tree"


def carry(slot_base: int = 0):
    return DenseCarry(slot_base)


__all__ = ["WIRE_MODEL", "carry", "install"]
