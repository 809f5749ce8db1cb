"""The reroute carry: what a job keeps of a running allreduce across a tree change.

Why one interface: a reroute (controller/job.py) always runs freeze, snapshot of the
old tree, reset, install, preload of the new tree; only what the snapshot looks for
and where the preload puts it depends on the pipeline the allreduce uses. So the job
holds one Carry, chosen by the allreduce algorithm with `carry_for`, and calls
snapshot/preload without knowing which:

- DenseCarry (switchml): per slot the version the old root completed
  (controller/failover.py).
- SparseCarry (omnireduce): every round some worker may still need, wherever in the
  old tree it is held (controller/sparse_failover.py), plus the dense carry, because
  the sparse agent's lead round runs on the dense pipeline (hosts/sparse_agent.py)
  and a reroute may land while some slots are still in it.

A dense allreduce thus no longer reads every switch's sparse registers on a reroute.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from controller import failover, sparse_failover
from controller.switch_client import SwitchClient
from controller.tree_install import Installation


@dataclass
class Carried:
    """A snapshot: the dense versions (slot -> failover.CompletedVersion) and, for the
    sparse pipeline, the rounds held in the old tree (sparse_failover.HeldRounds)."""
    dense: dict = field(default_factory=dict)
    sparse: sparse_failover.HeldRounds | None = None

    @property
    def slots(self) -> int:
        """Slot versions carried (the figure the job reports as preloaded)."""
        return len(self.dense) + (len(self.sparse) if self.sparse else 0)

    @property
    def conflicts(self) -> list:
        """(slot, ver, switch) where the sparse placement could not hold every round."""
        return self.sparse.conflicts if self.sparse else []


class Carry(Protocol):
    algorithm: str

    def snapshot(self, clients: dict[str, SwitchClient], old: Installation,
                 tree_of_slot: list[int], regs: dict | None = None, values: dict | None = None,
                 down=frozenset()) -> Carried:
        """Read, after the freeze, what the old tree holds that a worker may still need
        (`regs`: switch -> register -> values of scalars() already read; `values`: root ->
        r -> agg_values cells already read, failover.values_ahead_lines), from its live
        switches (`down`: dead switches, whose registers died with them)."""

    def preload(self, clients: dict[str, SwitchClient], new: Installation, tree_of_slot: list[int],
                carried: Carried) -> int:
        """Write it into the new tree (after the reset and install); register cells written."""

    def preload_lines(self, clients: dict[str, SwitchClient], new: Installation, tree_of_slot: list[int],
                      carried: Carried) -> tuple[dict, int]:
        """preload() as command lines per switch (to go out with other work), and the cells."""

    def scalars(self, old: Installation, tree_of_slot: list[int], down=frozenset()) -> dict[str, tuple[str, ...]]:
        """Per switch, the whole registers snapshot() reads first; a caller may read them
        itself (in the freeze's batch: a switch's state is final once it answered its
        freeze) and pass them to snapshot(..., regs=)."""


class DenseCarry:
    algorithm = "switchml"

    # the snapshot needs nothing the first reads (scalars, values ahead) do not give: a bulk
    # reroute can reset in the freeze's batch and preload in the next (two rounds, not three).
    # Not with a dead switch: a dead root's results are read from the live switches below it,
    # which the first reads do not cover (controller/job.py falls back to three rounds then)
    complete_ahead = True

    def __init__(self, slot_base: int = 0):
        self.slot_base = slot_base            # the job's slot range starts here (jobs share switches)

    def snapshot(self, clients, old, tree_of_slot, regs: dict | None = None,
                 values: dict | None = None, down=frozenset()) -> Carried:
        return Carried(dense=failover.snapshot(clients, old, tree_of_slot, self.slot_base, regs=regs,
                                               values=values, down=down))

    def scalars(self, old, tree_of_slot, down=frozenset()) -> dict[str, tuple[str, ...]]:
        return failover.snapshot_reads(old, tree_of_slot, down)

    def preload(self, clients, new, tree_of_slot, carried: Carried) -> int:
        lines, writes = self.preload_lines(clients, new, tree_of_slot, carried)
        failover.send_lines(clients, lines)
        return writes

    def preload_lines(self, clients, new, tree_of_slot, carried: Carried) -> tuple[dict, int]:
        return failover.preload_lines(clients, new, tree_of_slot, carried.dense, self.slot_base)


class SparseCarry(DenseCarry):
    algorithm = "omnireduce"

    complete_ahead = False          # the held rounds' values are wherever the scalars say

    def snapshot(self, clients, old, tree_of_slot, regs: dict | None = None,
                 values: dict | None = None, down=frozenset()) -> Carried:
        carried = super().snapshot(clients, old, tree_of_slot, regs, values, down)   # the lead rounds
        carried.sparse = sparse_failover.sparse_snapshot(clients, old, tree_of_slot, self.slot_base,
                                                         regs=regs, down=down)
        return carried

    def scalars(self, old, tree_of_slot, down=frozenset()) -> dict[str, tuple[str, ...]]:
        out = {sw: sparse_failover.SNAPSHOT_SCALARS for sw, _ in old.roles if sw not in down}
        for sw, names in super().scalars(old, tree_of_slot, down).items():
            out[sw] = out.get(sw, ()) + names
        return out

    def preload_lines(self, clients, new, tree_of_slot, carried: Carried) -> tuple[dict, int]:
        lines, writes = super().preload_lines(clients, new, tree_of_slot, carried)
        sparse, more = sparse_failover.sparse_preload_lines(clients, new, tree_of_slot, carried.sparse,
                                                            self.slot_base)
        for sw, batch in sparse.items():
            lines.setdefault(sw, []).extend(batch)
        return lines, writes + more


CARRIES = {c.algorithm: c for c in (DenseCarry, SparseCarry)}


def carry_for(algorithm: str, slot_base: int = 0) -> Carry:
    """The carry of an allreduce algorithm (ground.runspec.ALGORITHMS) for a job whose slot
    range starts at `slot_base`."""
    try:
        return CARRIES[algorithm](slot_base)
    except KeyError:
        raise ValueError(f"no reroute carry for algorithm {algorithm!r}; "
                         f"known: {', '.join(CARRIES)}") from None
