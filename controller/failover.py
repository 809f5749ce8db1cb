"""Carry a running dense allreduce across a tree change without losing a contribution.

The protocol (docs/design.md, "Epochs"): freeze the old epoch, snapshot per slot the
version the old root completed but some worker may not have seen, reset the new
tree's state and preload that version as complete, then tell the agents. A lagging
worker's retransmission is then answered (by the root, through the tree) with the
result it missed; everything incomplete is rebuilt from the workers' retransmissions
under the new epoch.

The job calls this through controller/carry.py (DenseCarry), which picks it or the
sparse pipeline's carry (controller/sparse_failover.py) by the allreduce algorithm;
`reset` and `write_preload` here serve both.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ground import wire
from controller.switch_client import SwitchClient
from controller.tree_install import Installation

# Everything a reset zeroes: the dense registers and the sparse pipeline's (p4src/include/sparse.p4);
# sp_next must be 0 on a new tree so a round waits until every child has announced again.
REGISTERS = ("agg_values", "agg_bitmap", "agg_count", "agg_exp", "agg_final", "agg_block",
             "sp_values", "sp_block", "sp_bitmap", "sp_final", "sp_exp", "sp_rnext", "sp_done",
             "sp_ack", "sp_next", "sp_exp_next")


@dataclass
class CompletedVersion:
    slot: int
    ver: int
    exp: int
    values: np.ndarray       # K unsigned 32-bit register values
    block: int = 0           # agg_block: the round's block (so a later carry can tell rounds apart)


def slot_index(ver: int, slot_base: int, slot: int) -> int:
    """Register index of a slot version (aggregate.p4 and sparse.p4 alike)."""
    return ver * wire.SLOTS + slot_base + slot


def snapshot(clients: dict[str, SwitchClient], inst: Installation, tree_of_slot: list[int],
             slot_base: int = 0, down: frozenset = frozenset()) -> dict[int, CompletedVersion]:
    """Per slot, the complete-and-maybe-needed version at its old tree's root (if any).

    A dead root (`down`: its registers died with it) is stood in for by the live switches
    of its tree. A version one of them holds as the final result (`agg_final`, the root
    completed it and it came down) is needed when a child's bit is still set there (that
    child has not moved on), or when another live switch still waits in the same round:
    the same version holding the same block (`agg_block`), complete below it or not, without
    the result (a result lost on one path while it reached the others). The block tells the
    rounds apart: by registers alone, a subtree one round behind (waiting on v, done with
    1-v) and one ahead (done with v, waiting on 1-v) look the same."""
    roots = {tree: role for (_sw, tree), role in inst.roles.items() if role.root}
    cache: dict[tuple[str, str], np.ndarray] = {}

    def reg(sw: str, name: str) -> np.ndarray:                   # each register read once
        if (sw, name) not in cache:
            cache[sw, name] = np.array(clients[sw].register_read(name), dtype=np.int64)
        return cache[sw, name]

    wanted: dict[str, list[tuple[int, int, int]]] = {}          # holder -> [(slot, ver, r)]
    for slot, tree in enumerate(tree_of_slot):
        root = roots[tree]
        if root.switch not in down:
            holder = _root_holds(reg, root, slot_base, slot)
        else:
            live = sorted((role for (sw, t), role in inst.roles.items() if t == tree and sw not in down),
                          key=lambda role: role.switch)
            holder = _held_below(reg, live, slot_base, slot)
        if holder:
            sw, ver, r = holder
            wanted.setdefault(sw, []).append((slot, ver, r))
    found: dict[int, CompletedVersion] = {}
    for sw, items in wanted.items():                              # one batch per holder
        ranges = [(r * wire.K, wire.K) for _, _, r in items]
        for (slot, ver, r), values in zip(items, clients[sw].register_read_ranges("agg_values", ranges)):
            found[slot] = CompletedVersion(slot, ver, int(reg(sw, "agg_exp")[r]), np.array(values),
                                           int(reg(sw, "agg_block")[r]))
    return found


def _root_holds(reg, root, slot_base: int, slot: int):
    """(root, ver, r) of the version the live root completed and some child may lack."""
    for ver in (0, 1):
        r = slot_index(ver, slot_base, slot)
        if reg(root.switch, "agg_count")[r] == len(root.children) and reg(root.switch, "agg_bitmap")[r] != 0:
            return root.switch, ver, r
    return None


def _held_below(reg, live: list, slot_base: int, slot: int):
    """(switch, ver, r) of a final result some live switch holds and some worker still needs,
    for a tree whose root died."""
    for ver in (0, 1):
        r = slot_index(ver, slot_base, slot)
        waiting = {int(reg(role.switch, "agg_block")[r]) for role in live
                   if reg(role.switch, "agg_bitmap")[r] != 0 and reg(role.switch, "agg_final")[r] != 1}
        for role in live:
            sw = role.switch
            if reg(sw, "agg_final")[r] == 1 and reg(sw, "agg_count")[r] == len(role.children) \
                    and (reg(sw, "agg_bitmap")[r] != 0 or int(reg(sw, "agg_block")[r]) in waiting):
                return sw, ver, r
    return None


def reset(clients: dict[str, SwitchClient], switches) -> None:
    """Zero the aggregation registers (one job per network: the job owns them)."""
    for sw in switches:
        clients[sw].commands([f"register_reset {name}" for name in REGISTERS])


def preload(clients: dict[str, SwitchClient], inst: Installation, tree_of_slot: list[int],
            completed: dict[int, CompletedVersion], slot_base: int = 0) -> int:
    """Write the completed versions into the new tree: full result at its root, complete
    bitmap/count everywhere (so duplicates are answered). Returns register cells written."""
    lines: dict[str, list[str]] = {}
    values: dict[tuple[str, int], np.ndarray] = {}
    for slot, done in completed.items():
        tree = tree_of_slot[slot]
        r = slot_index(done.ver, slot_base, slot)
        for (sw, t), role in inst.roles.items():
            if t != tree:
                continue
            out = lines.setdefault(sw, [])
            fan_in = len(role.children)
            out += [f"register_write agg_count {r} {fan_in}",
                    f"register_write agg_bitmap {r} {(1 << fan_in) - 1}",
                    f"register_write agg_block {r} {done.block}"]
            if role.root:
                out += [f"register_write agg_exp {r} {done.exp}", f"register_write agg_final {r} 1"]
                values[sw, r] = done.values
    return write_preload(clients, lines, values, "agg_values")


def write_preload(clients: dict[str, SwitchClient], lines: dict[str, list[str]],
                  values: dict[tuple[str, int], np.ndarray], register: str) -> int:
    """Send a preload: per switch its scalar register writes `lines` plus the K lanes of
    each (switch, r) in `values` into `register`, as one pipelined batch per switch.
    Returns the register cells written."""
    writes = sum(len(b) for b in lines.values()) + wire.K * len(values)
    for (sw, r), vals in values.items():
        lines[sw] += clients[sw].register_write_range_lines(register, r * wire.K,
                                                            [int(v) & 0xFFFFFFFF for v in vals])
    for sw, batch in lines.items():
        clients[sw].commands(batch)          # one pipelined batch per switch
    return writes
