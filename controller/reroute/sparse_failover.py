"""Carry the sparse pipeline's rounds across a tree change (docs/design/sparse.md, "Sparse reroute").

Why not controller/reroute/failover.py's snapshot: in the sparse pipeline the result a lagging
worker still needs is not always at the root. A switch keeps a completed round ("custody")
until every child acknowledged it, and a child switch acknowledges at its parent as soon
as it sends a later block up, even while a worker below it still lacks the round: the
parent (and the root) may then have moved on, reusing the version for a later round, and
the only copy of the result is lower down. Reading the root alone lost exactly those
rounds; after the reset the lagging worker's new leaf held nothing in that version, adopted
the later round coming down from its parent and the worker saw its version overwritten.

So the snapshot reads every switch of the old tree and works out, per worker, slot and
version, the round it may still need: walking up its old path, the first switch holding a
completed result (sp_final) whose acknowledgement bit for the child on that path is clear,
for a round newer than any acknowledged below it (a parent may hold a newer result that
the switches below have not received yet).
Results are the same wherever they are held (they come down from the root), so any holder
gives the values.

The preload places those rounds in the new tree the way the old protocol keeps them: a
switch with workers below holds the oldest round they need (it answers their probes, and
holds back the version's next round until each of them acknowledged it); a switch above
holds the newest round needed below it, so a child that catches up sends that round up and
gets the stored result back (its bit is in the bitmap: a duplicate) instead of rebuilding
a completed round from probes (placement()). Held rounds are
written complete and final with sp_ack = 0 (the new tree's children must say again that
they are done); sp_next stays 0, so no new round completes before every child announced
again. Rounds still in progress at the freeze are not carried: their participants resend.

Call order as for the dense pipeline: freeze, sparse_snapshot(old installation), reset
(failover.reset zeroes the sp_ registers too), install, sparse_preload(new installation);
the job does it through controller/reroute/carry.py (SparseCarry), for omnireduce allreduces.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from agglab.ground import wire
from agglab.controller.reroute.failover import CellWrites, read_registers, slot_index, write_preload
from agglab.controller.switch_batches import on_each, read_ranges
from agglab.controller.switch_client import SwitchClient
from agglab.controller.tree_install import Installation

SNAPSHOT_SCALARS = _SCALARS = ("sp_block", "sp_bitmap", "sp_final", "sp_ack", "sp_exp", "sp_rnext")


@dataclass
class SparseRound:
    """A completed round's result: what a lagging worker may still ask for."""
    slot: int
    ver: int
    block: int
    exp: int
    next_block: int
    values: np.ndarray | None   # K unsigned 32-bit register values (None: every placement has them)


@dataclass
class HeldRounds:
    """What the old tree held that some worker may still need."""
    rounds: dict = field(default_factory=dict)   # (slot, ver, block) -> SparseRound
    needs: dict = field(default_factory=dict)    # (slot, ver) -> {worker: block}
    conflicts: list = field(default_factory=list)   # (slot, ver, switch): see placement()
    # (switch, r) where the preload's placement puts a round the switch already holds final
    # in its sp_values at r: its values stay there (neither read, nor reset, nor written)
    in_place: set = field(default_factory=set)

    def __len__(self) -> int:
        return len(self.needs)


def tree_roles(inst: Installation, tree: int) -> dict:
    """switch -> SwitchRole of one tree."""
    return {sw: role for (sw, t), role in inst.roles.items() if t == tree}


def worker_paths(roles: dict) -> dict[str, list[tuple[str, int]]]:
    """worker -> [(switch, index of the child on the path), ...] from its leaf up to the root."""
    up = {c: (sw, i) for sw, role in roles.items() for i, c in enumerate(role.children)}
    paths = {}
    for w in (c for c in up if c not in roles):
        path, node = [], w
        while node in up:
            sw, i = up[node]
            path.append((sw, i))
            node = sw
        paths[w] = path
    return paths


def _read_scalars(clients, switches) -> dict[str, dict[str, np.ndarray]]:
    """One batch per switch, all switches at once where they allow (switch_client.on_each)."""
    return on_each(clients, switches, lambda sw: read_registers(clients[sw], _SCALARS))


def sparse_snapshot(clients: dict[str, SwitchClient], inst: Installation, tree_of_slot: list[int],
                    slot_base: int = 0, regs: dict | None = None, values: dict | None = None,
                    down=frozenset(), new: tuple | None = None) -> HeldRounds:
    """Per slot and version, the round each worker of the old tree may still need (if any)
    and those rounds' results, read from every live switch of the old tree. `regs`: the
    switches' SNAPSHOT_SCALARS, if already read (each after its own freeze); `values`: switch
    -> r -> its K sp_values cells, if already read (a holder lacking some is read here).

    A dead switch (`down`) holds nothing: the walk asks higher up. Custody makes that enough
    below a live root: a switch keeps a completed round until every child acknowledged it,
    and a dead child never does, so a result that died with a switch is still held by a live
    ancestor; there, the dead child's acknowledgement bit is ignored (it acknowledged on
    sending a later block up while it still held the round for a worker below; carrying a
    round the worker in fact has is harmless: its next packet acknowledges it at the leaf).
    A result that died with a switch may also survive only off the worker's path: the dead
    root's copies in the subtrees it had reached, or the copies in other subtrees of a round
    whose custody the dead switch had (its parent reused the version once it acknowledged).
    So a worker with a dead switch on its path and nothing held for it on the path needs,
    per version, the oldest round any live switch of the tree holds final that is newer than
    what its leaf says it is done with (a round it acknowledged there, or everything below a
    block it sent). A round too new would not be harmless (its probe would be stale).

    `new`: (new installation, new tree_of_slot), where sparse_preload_cells will place the
    rounds: a placement on a switch that holds the same round final at the same cells (an
    edge switch on both trees, mostly) keeps its values (HeldRounds.in_place), and a round
    every placement of which keeps them is not read at all."""
    switches = sorted({sw for sw, _ in inst.roles} - set(down))
    regs = dict(regs or {})
    regs.update(_read_scalars(clients, [sw for sw in switches
                                        if not all(n in regs.get(sw, {}) for n in SNAPSHOT_SCALARS)]))
    regs, carry, holders, wanted = _held({sw: regs[sw] for sw in switches}, inst, tree_of_slot, slot_base, down, new)
    values = values or {}
    reading = {sw: [item for item in items if item[:3] in wanted] for sw, items in holders.items()}
    missing = [sw for sw, items in reading.items() if any(item[-1] not in values.get(sw, {}) for item in items)]
    read = read_ranges(clients, "sp_values", {sw: [(r * wire.K, wire.K) for *_, r in reading[sw]]
                                              for sw in missing})     # one batch per holder, all at once
    lanes: dict[tuple[int, int, int], np.ndarray] = {}     # (slot, ver, block) -> the values read
    for sw, items in reading.items():
        cells = read[sw] if sw in read else [values[sw][item[-1]] for item in items]
        for (slot, ver, block, r), got in zip(items, cells):
            lanes[slot, ver, block] = np.asarray(got).astype(np.uint32)
    for sw, items in holders.items():
        for slot, ver, block, r in items:
            carry.rounds[slot, ver, block] = SparseRound(
                slot, ver, block, int(regs[sw]["sp_exp"][r]), int(regs[sw]["sp_rnext"][r]),
                lanes.get((slot, ver, block)))
    return carry


def sparse_value_reads(regs: dict, inst: Installation, tree_of_slot: list[int], slot_base: int = 0,
                       down=frozenset(), new: tuple | None = None) -> tuple[dict[str, list], dict[str, set[int]]]:
    """What sparse_snapshot(regs=regs, new=new) will need, decided from the scalars alone
    (`regs`: every live switch's SNAPSHOT_SCALARS): per holder, the sp_values cell runs of
    the held rounds some placement needs, and per switch the sp_values slot versions kept
    in place (HeldRounds.in_place). Why: on BMv2 a bulk reroute reads these with the new
    trees' batches and resets in the same batch (before, the holders' values were a round of
    their own, after which the reset waited for the last round); the snapshot then finds
    every value it needs among those read and reads nothing itself."""
    switches = sorted({sw for sw, _ in inst.roles} - set(down))
    _regs, carry, holders, wanted = _held({sw: regs[sw] for sw in switches}, inst, tree_of_slot, slot_base, down, new)
    runs: dict[str, list] = {}
    for sw, items in holders.items():
        rows = sorted({r for *key, r in items if tuple(key) in wanted})
        if rows:
            runs[sw] = [(r * wire.K, wire.K) for r in rows]
    kept: dict[str, set[int]] = {}
    for sw, r in carry.in_place:
        kept.setdefault(sw, set()).add(r)
    return runs, kept


def _held(regs: dict, inst: Installation, tree_of_slot: list[int], slot_base: int, down,
          new: tuple | None) -> tuple[dict, HeldRounds, dict, set]:
    """sparse_snapshot's walk over the scalars `regs` (switch -> SNAPSHOT_SCALARS, every
    live switch): (the scalars as window lists, the HeldRounds without values, holder ->
    [(slot, ver, block, r)], the (slot, ver, block) rounds whose values some placement needs)."""
    switches = sorted(regs)
    # plain lists (of the window's cells; the rest stay 0): the walk below reads single cells
    # some 10,000 times, and a numpy array's item access costs several times a list's
    window = [(slot_index(ver, slot_base, 0), len(tree_of_slot)) for ver in (0, 1)]
    regs = {sw: {name: _window_list(regs[sw][name], window) for name in SNAPSHOT_SCALARS} for sw in switches}
    carry = HeldRounds()
    holders: dict[str, list[tuple[int, int, int, int]]] = {}    # switch -> [(slot, ver, block, r)]
    paths_of = {t: worker_paths(tree_roles(inst, t)) for t in set(tree_of_slot)}
    on_tree = {t: [sw for sw in tree_roles(inst, t) if sw not in down] for t in set(tree_of_slot)}

    def need(slot: int, ver: int, worker: str, block: int, sw: str, r: int) -> None:
        carry.needs.setdefault((slot, ver), {})[worker] = block
        if (slot, ver, block) not in carry.rounds:
            carry.rounds[slot, ver, block] = None
            holders.setdefault(sw, []).append((slot, ver, block, r))

    # per tree, each worker's path with its switches' registers bound (the walk's inner loop):
    # (switch, child, dead, sp_final, sp_bitmap, sp_block, sp_ack), leaf first
    walks = {t: [(worker, path, any(sw in down for sw, _ in path),
                  [(sw, child, True, None, None, None, None) if sw in down else
                   (sw, child, False, *(regs[sw][n] for n in ("sp_final", "sp_bitmap", "sp_block", "sp_ack")))
                   for sw, child in path])
                 for worker, path in paths.items()] for t, paths in paths_of.items()}
    for slot, tree in enumerate(tree_of_slot):
        for ver in (0, 1):
            r = slot_index(ver, slot_base, slot)
            for worker, path, dead_on_path, steps in walks[tree]:
                acked = -1                       # newest round known to have reached the worker
                found = below_dead = False
                for sw, child, dead, final, bitmap, blocks, acks in steps:
                    if dead:
                        below_dead = True
                        continue                 # died with its registers: ask higher up
                    if not (final[r] and bitmap[r]):
                        below_dead = False
                        continue                 # nothing complete held here: ask higher up
                    block = blocks[r]
                    child_acked = (acks[r] >> child) & 1 and not below_dead
                    below_dead = False
                    if child_acked or block <= acked:
                        if block > acked:        # done with it; a newer one may be above
                            acked = block
                        continue
                    need(slot, ver, worker, block, sw, r)
                    found = True
                    break
                if found or not dead_on_path or path[0][0] in down:
                    continue
                leaf, me = regs[path[0][0]], path[0][1]
                for u in (0, 1):                 # what the worker's leaf knows it is done with
                    ru = slot_index(u, slot_base, slot)
                    if leaf["sp_bitmap"][ru] and (int(leaf["sp_ack"][ru]) >> me) & 1:
                        acked = max(acked, int(leaf["sp_block"][ru]))
                    elif (int(leaf["sp_bitmap"][ru]) >> me) & 1 and not leaf["sp_final"][ru]:
                        acked = max(acked, int(leaf["sp_block"][ru]) - 1)   # it sent that block
                held = sorted((int(regs[sw]["sp_block"][r]), sw) for sw in on_tree[tree]
                              if regs[sw]["sp_final"][r] and regs[sw]["sp_bitmap"][r]
                              and int(regs[sw]["sp_block"][r]) > acked)
                if held:                         # the oldest round it may lack, held off its path
                    need(slot, ver, worker, held[0][0], held[0][1], r)
    wanted = set(carry.rounds)                 # rounds whose values some placement needs
    if new is not None:
        new_inst, new_tree_of_slot = new
        new_roles = {t: tree_roles(new_inst, t) for t in set(new_tree_of_slot)}
        wanted = set()
        for (slot, ver), needs in carry.needs.items():
            r = slot_index(ver, slot_base, slot)
            for sw, block in placement(new_roles[new_tree_of_slot[slot]], needs).items():
                held = regs.get(sw)
                if held is not None and held["sp_final"][r] and held["sp_bitmap"][r] and held["sp_block"][r] == block:
                    carry.in_place.add((sw, r))
                else:
                    wanted.add((slot, ver, block))
    return regs, carry, holders, wanted


def _window_list(cells, window) -> list[int]:
    """A register's cells as a list, only the runs of `window` filled in."""
    out = [0] * len(cells)
    for start, count in window:
        out[start:start + count] = [int(v) for v in cells[start:start + count]] if not isinstance(cells, np.ndarray) \
            else cells[start:start + count].tolist()
    return out


def placement(roles: dict, needs: dict[str, int], conflicts: list | None = None) -> dict[str, int]:
    """switch -> block to hold, for one slot version of one tree.

    A switch with workers right below holds the oldest round they need: it answers their
    probes and holds the version's next round back until each acknowledged it. Every other
    switch holds the newest round needed anywhere below it: a child that catches up asks
    for that round next, and it must be answered from the stored result. Rebuilding a
    completed round from probes would be wrong, since the workers that already have it
    announce only their later blocks and the round's `next` would skip one.

    A switch with workers *and* child switches below (an edge switch that relays, after
    several failures) cannot do both when its workers need an older round than its child
    switches: one register per version. Its workers win; the switch is appended to
    `conflicts` (such a column may stall; the controller logs it).
    """
    held: dict[str, int] = {}

    def visit(sw: str) -> int | None:
        children = roles[sw].children
        below = [b for b in (visit(c) for c in children if c in roles) if b is not None]
        own = [needs[c] for c in children if c not in roles and c in needs]
        newest = max(below + own, default=None)
        if own or below:
            held[sw] = min(own) if own else newest
            if own and below and min(own) < max(below) and conflicts is not None:
                conflicts.append(sw)
        return newest

    for root in (sw for sw, role in roles.items() if role.root):
        visit(root)
    return held


def sparse_preload(clients: dict[str, SwitchClient], inst: Installation, tree_of_slot: list[int],
                   carry: HeldRounds, slot_base: int = 0) -> int:
    """Write the carried rounds into the new tree (after failover.reset: everything 0) where
    placement() puts them: block, values, exp, next, every child's bit, done and final.
    Returns the number of register cells written."""
    return write_preload(clients, sparse_preload_cells(inst, tree_of_slot, carry, slot_base))


def sparse_preload_cells(inst: Installation, tree_of_slot: list[int], carry: HeldRounds, slot_base: int = 0) -> CellWrites:
    """sparse_preload()'s register cells (placement() of every carried round)."""
    cells = CellWrites()
    roles_of = {t: tree_roles(inst, t) for t in set(tree_of_slot)}
    for (slot, ver), needs in carry.needs.items():
        roles = roles_of[tree_of_slot[slot]]
        r = slot_index(ver, slot_base, slot)
        clash: list = []
        for sw, block in placement(roles, needs, clash).items():
            rnd = carry.rounds[slot, ver, block]
            cells.put_cells(sw, r, {"sp_block": block, "sp_bitmap": (1 << len(roles[sw].children)) - 1, "sp_done": 1,
                                    "sp_final": 1, "sp_exp": rnd.exp, "sp_rnext": rnd.next_block})
            if (sw, r) in carry.in_place:        # held there already (sparse_snapshot's `new`)
                continue
            if rnd.values is None:
                raise ValueError(f"slot {slot} version {ver} block {block}: no values read for {sw}")
            cells.put_lanes(sw, "sp_values", r, rnd.values)
        carry.conflicts += [(slot, ver, sw) for sw in clash]
    return cells
