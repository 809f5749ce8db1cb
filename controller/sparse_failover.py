"""Carry the sparse pipeline's rounds across a tree change (docs/design.md, "Sparse pipeline").

Why a sparse twin of controller/failover.py: the sparse registers say "complete" differently
(sp_done and sp_final instead of count == fan_in) and a round is identified by its block
(sp_block) rather than by the version alone. Per slot, the old root may hold a completed round
in both versions. The newer one (larger sp_block) is always carried. The older one is carried
too unless the old root's sp_ack says every child is done with it: a worker that sat out the
newer round may still lack the older result (its result was in flight at the freeze, or lost),
while the others already send the round after the newer one in the older round's version.
Keeping only the newer round left that version empty in the new tree; the others' packets
started their round there, the lagging worker's probe was then stale (block below the held
one) and dropped, and its leaf never learnt its sp_next: the column stalled.

A carried round is written into the new tree as complete, so a lagging worker's retransmission
or probe is answered (at the root directly, below it through DUP_UP and the parent's reply)
instead of starting the round again with only the lagging worker's values. sp_ack stays 0 on
every switch (the new tree has other children; nobody is known done with anything): a new round
in that version waits until every child has sent a packet for a later block or an ACK, which
every worker does for its unfinished columns on the epoch change (its resend of data or a probe
for the round it is in) or after it fetched the carried result.

Call order as for the dense pipeline: freeze, sparse_snapshot(old installation), reset
(failover.reset zeroes the sp_ registers too), install, sparse_preload(new installation).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from agglab import wire
from controller.switch_client import SwitchClient
from controller.failover import old_roots, slot_index
from controller.tree_install import Installation

_SCALARS = ("sp_done", "sp_final", "sp_block", "sp_exp", "sp_rnext", "sp_ack")


@dataclass
class SparseRound:
    """A round the old root completed: what a lagging worker may still ask for."""
    slot: int
    ver: int
    block: int
    exp: int
    next_block: int
    values: np.ndarray       # K unsigned 32-bit register values


def sparse_snapshot(clients: dict[str, SwitchClient], inst: Installation, tree_of_slot: list[int],
                    slot_base: int = 0) -> dict[int, list[SparseRound]]:
    """Per slot, the completed (sp_done and sp_final) rounds at the old tree's root that a
    worker may still ask for: the one with the larger sp_block, and the other version's too
    unless every child of the old root acknowledged it (sp_ack == all). Oldest first."""
    found: dict[int, list[SparseRound]] = {}
    for slot, role, regs in old_roots(clients, inst, tree_of_slot, _SCALARS):
        root = role.switch
        every = (1 << len(role.children)) - 1
        done = [r for r in (slot_index(0, slot_base, slot), slot_index(1, slot_base, slot))
                if regs["sp_done"][r] and regs["sp_final"][r]]
        done.sort(key=lambda r: regs["sp_block"][r])
        if len(done) == 2 and (regs["sp_ack"][done[0]] & every) == every:
            done = done[1:]                      # everyone is done with the older round
        rounds = []
        for r in done:
            values = np.array(clients[root].register_read_range("sp_values", r * wire.K, wire.K),
                              dtype=np.uint32)
            rounds.append(SparseRound(slot, r // wire.SLOTS, int(regs["sp_block"][r]),
                                      int(regs["sp_exp"][r]), int(regs["sp_rnext"][r]), values))
        if rounds:
            found[slot] = rounds
    return found


def sparse_preload(clients: dict[str, SwitchClient], inst: Installation, tree_of_slot: list[int],
                   completed: dict[int, list[SparseRound]], slot_base: int = 0) -> int:
    """Write each carried round into the new tree (after failover.reset: sp_ack, sp_next and
    everything else 0): at its root the result (block, values, exp, next, every child's bit,
    done, final); at every other switch of that tree block, every child's bit and done, so a
    duplicate goes up for the root's answer. Returns the number of register cells written."""
    lines: dict[str, list[str]] = {}
    values: dict[tuple[str, int], np.ndarray] = {}
    for rnd in (r for rounds in completed.values() for r in rounds):
        slot = rnd.slot
        tree = tree_of_slot[slot]
        r = slot_index(rnd.ver, slot_base, slot)
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
