"""Carry the sparse pipeline's rounds across a tree change (docs/design.md, "Sparse pipeline").

Why a sparse twin of controller/failover.py: the sparse registers say "complete" differently
(sp_done and sp_final instead of count == fan_in) and a round is identified by its block
(sp_block) rather than by the version alone. Per slot, the old root may hold a completed round
in both versions; design.md keeps the newer one (larger sp_block), since whoever contributed to
it had already received the older round's result. That round is written into the new tree as complete, so a lagging worker's retransmission or
probe is answered (at the root directly, below it through DUP_UP and the parent's reply)
instead of starting the round again with only the lagging worker's values.

Call order as for the dense pipeline: freeze, sparse_snapshot(old installation), reset
(failover.reset zeroes the sp_ registers too), install, sparse_preload(new installation).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from agglab import wire
from controller.switch_client import SwitchClient
from controller.tree_install import Installation

_SCALARS = ("sp_done", "sp_final", "sp_block", "sp_exp", "sp_rnext")


@dataclass
class SparseRound:
    """A round the old root completed: what a lagging worker may still ask for."""
    slot: int
    ver: int
    block: int
    exp: int
    next_block: int
    values: np.ndarray       # K unsigned 32-bit register values


def _index(ver: int, slot_base: int, slot: int) -> int:
    return ver * wire.SLOTS + slot_base + slot


def sparse_snapshot(clients: dict[str, SwitchClient], inst: Installation, tree_of_slot: list[int],
                    slot_base: int = 0) -> dict[int, SparseRound]:
    """Per slot, the completed (sp_done and sp_final) version with the larger sp_block at the
    old tree's root, if any."""
    roots = {tree: role for (_sw, tree), role in inst.roles.items() if role.root}
    cache: dict[str, dict[str, np.ndarray]] = {}
    found: dict[int, SparseRound] = {}
    for slot, tree in enumerate(tree_of_slot):
        root = roots[tree].switch
        regs = cache.get(root)
        if regs is None:
            regs = cache[root] = {name: np.array(clients[root].register_read(name), dtype=np.int64)
                                  for name in _SCALARS}
        best = None
        for ver in (0, 1):
            r = _index(ver, slot_base, slot)
            if regs["sp_done"][r] and regs["sp_final"][r]:
                if best is None or regs["sp_block"][r] > regs["sp_block"][best]:
                    best = r
        if best is None:
            continue
        values = np.array(clients[root].register_read_range("sp_values", best * wire.K, wire.K),
                          dtype=np.uint32)
        found[slot] = SparseRound(slot, best // wire.SLOTS, int(regs["sp_block"][best]),
                                  int(regs["sp_exp"][best]), int(regs["sp_rnext"][best]), values)
    return found


def sparse_preload(clients: dict[str, SwitchClient], inst: Installation, tree_of_slot: list[int],
                   completed: dict[int, SparseRound], slot_base: int = 0) -> int:
    """Write each completed round into the new tree: at its root the result (block, values,
    exp, next, every child's bit, done, final); at every other switch of that tree block,
    every child's bit and done, so a duplicate goes up for the root's answer. Returns the
    number of register cells written."""
    lines: dict[str, list[str]] = {}
    values: dict[tuple[str, int], np.ndarray] = {}
    for slot, rnd in completed.items():
        tree = tree_of_slot[slot]
        r = _index(rnd.ver, slot_base, slot)
        for (sw, t), role in inst.roles.items():
            if t != tree:
                continue
            out = lines.setdefault(sw, [])
            out += [f"register_write sp_block {r} {rnd.block}",
                    f"register_write sp_bitmap {r} {(1 << len(role.children)) - 1}",
                    f"register_write sp_done {r} 1"]
            if role.root:
                out += [f"register_write sp_exp {r} {rnd.exp}",
                        f"register_write sp_rnext {r} {rnd.next_block}",
                        f"register_write sp_final {r} 1"]
                values[sw, r] = rnd.values
    writes = sum(len(b) for b in lines.values()) + wire.K * len(values)
    for (sw, r), vals in values.items():
        lines[sw] += clients[sw].register_write_range_lines("sp_values", r * wire.K,
                                                            [int(v) & 0xFFFFFFFF for v in vals])
    for sw, batch in lines.items():
        clients[sw].commands(batch)          # one pipelined batch per switch
    return writes
