"""Which switch of the old trees holds, per slot, the result a dense reroute must carry.

Why a module of its own: a bulk reroute on BMv2 decides which agg_values cells to read from the
small per-slot registers alone (counts, bitmaps, blocks, finals), before it reads any values.
BMv2 has no range read, so the values of every window slot at an old root were one
whole-register read (131,072 cells, a 1 MB answer, 37-55 ms on a loaded switch) although a
reroute carries only the slot versions some worker may still lack; read as single cells, those
few are cheap. The snapshot (failover.snapshot) and the reroute's reads (bulk.py, through the
carry's value_reads) ask the same question here, so both read exactly what is carried.
"""

from __future__ import annotations

from agglab.ground import wire
from agglab.controller.tree_install import Installation

SNAPSHOT_SCALARS = ("agg_count", "agg_bitmap", "agg_exp", "agg_block", "agg_rnext")
DEAD_ROOT_SCALARS = SNAPSHOT_SCALARS + ("agg_final",)   # every live switch of a tree whose root died


def slot_index(ver: int, slot_base: int, slot: int) -> int:
    """Register index of a slot version (aggregate.p4 and sparse.p4 alike)."""
    return ver * wire.SLOTS + slot_base + slot


def snapshot_reads(inst: Installation, tree_of_slot: list[int], down=frozenset()) -> dict[str, tuple[str, ...]]:
    """Per switch, the registers a snapshot reads: the roots of the trees some slot uses
    (SNAPSHOT_SCALARS); for a tree whose root died, every live switch of it (DEAD_ROOT_SCALARS)."""
    roots = {tree: role.switch for (_sw, tree), role in inst.roles.items() if role.root}
    out: dict[str, tuple[str, ...]] = {}
    for tree in set(tree_of_slot):
        if roots[tree] not in down:
            out.setdefault(roots[tree], SNAPSHOT_SCALARS)
            continue
        for sw, t in inst.roles:
            if t == tree and sw not in down:
                out[sw] = DEAD_ROOT_SCALARS
    return out


def find_holders(reg, inst: Installation, tree_of_slot: list[int], slot_base: int = 0,
                 down=frozenset()) -> dict[str, list[tuple[int, int, int]]]:
    """Per holder switch, [(slot, ver, r)]: the slot versions whose result some worker may
    still need, from the snapshot_reads() registers (`reg(switch, name)` -> the register's
    cells). A live root holds the version it completed while a child's bit is still set
    (_root_holds); for a dead root, a live switch of its tree holding the final result
    (_held_below)."""
    roots = {tree: role for (_sw, tree), role in inst.roles.items() if role.root}
    wanted: dict[str, list[tuple[int, int, int]]] = {}
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
    return wanted


def held_value_runs(regs: dict, inst: Installation, tree_of_slot: list[int], slot_base: int = 0,
                    down=frozenset(), keep: dict | None = None) -> dict[str, list[tuple[int, int]]]:
    """Per holder, the agg_values cell runs [(start, count)] a snapshot needs, given the
    snapshot_reads() registers already read (`regs`: switch -> name -> cells): the K lanes
    of each held slot version, except those left in place (`keep`: switch -> slot versions,
    failover.kept_rows), consecutive slot versions merged."""
    keep = keep or {}
    runs: dict[str, list[tuple[int, int]]] = {}
    for sw, items in find_holders(lambda s, n: regs[s][n], inst, tree_of_slot, slot_base, down).items():
        kept = keep.get(sw, ())
        out: list[tuple[int, int]] = []
        for r in sorted(r for *_, r in items if r not in kept):
            if out and out[-1][0] + out[-1][1] == r * wire.K:
                out[-1] = (out[-1][0], out[-1][1] + wire.K)
            else:
                out.append((r * wire.K, wire.K))
        if out:
            runs[sw] = out
    return runs


def _root_holds(reg, root, slot_base: int, slot: int):
    """(root, ver, r) of the version the live root completed and some child may lack."""
    # EXERCISE carry-find BEGIN hint: for each version ver of the slot (register index r = slot_index(ver, slot_base, slot)), the old root completed it when reg(root.switch, "agg_count")[r] equals its fan-in (len(root.children)); some child still lacks its result while that child's bit is set in reg(root.switch, "agg_bitmap")[r] (a child's next round clears it: the shadow copy); return (root.switch, ver, r) of that version, or None
    for ver in (0, 1):
        r = slot_index(ver, slot_base, slot)
        if reg(root.switch, "agg_count")[r] == len(root.children) and reg(root.switch, "agg_bitmap")[r] != 0:
            return root.switch, ver, r
    return None
    # EXERCISE END


def _held_below(reg, live: list, slot_base: int, slot: int):
    """(switch, ver, r) of a final result some live switch holds and some worker still needs,
    for a tree whose root died. A version one of them holds as the final result (`agg_final`,
    the root completed it and it came down) is needed when a child's bit is still set there
    (that child has not moved on), or when another live switch still waits in the same round:
    the same version holding the same block (`agg_block`), complete below it or not, without
    the result (a result lost on one path while it reached the others). The block tells the
    rounds apart: by registers alone, a subtree one round behind (waiting on v, done with
    1-v) and one ahead (done with v, waiting on 1-v) look the same."""
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
