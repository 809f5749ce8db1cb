"""The reroute carry: what a job keeps of a running allreduce across a tree change.

Why one interface: a reroute (steps.py, bulk.py) always runs freeze, snapshot of the
old tree, reset, install, preload of the new tree; only what the snapshot looks for
and where the preload puts it depends on the pipeline the allreduce uses. So the job
holds one Carry, chosen by the allreduce's scheme (the job is given the scheme registry's
`carry_for`, controller/schemes: this package names no scheme and imports none), and calls
snapshot/preload without knowing which:

- DenseCarry (switchml): per slot the version the old root completed
  (controller/reroute/failover.py).
- SparseCarry (omnireduce): every round some worker may still need, wherever in the
  old tree it is held (controller/reroute/sparse_failover.py), plus the dense carry, because
  the sparse agent's lead round runs on the dense pipeline (hosts/sparse_agent.py)
  and a reroute may land while some slots are still in it.

A dense allreduce thus no longer reads every switch's sparse registers on a reroute.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from agglab.controller.reroute import failover, sparse_failover
from agglab.controller.switch_client import SwitchClient
from agglab.controller.tree_install import Installation


@dataclass
class Carried:
    """A snapshot: the dense versions (slot -> failover.CompletedVersion) and, for the
    sparse pipeline, the rounds held in the old tree (sparse_failover.HeldRounds)."""
    dense: dict = field(default_factory=dict)
    sparse: sparse_failover.HeldRounds | None = None
    # switch -> lanes register -> slot versions whose values stay in place (neither read, nor
    # reset, nor written: the new tree needs them where the old one held them)
    kept: dict = field(default_factory=dict)

    @property
    def slots(self) -> int:
        """Slot versions carried (the figure the job reports as preloaded)."""
        return len(self.dense) + (len(self.sparse) if self.sparse else 0)

    @property
    def in_place(self) -> int:
        """Carried results whose values stayed where the new tree needs them (no register
        traffic for their lanes): dense slot versions, and sparse placements."""
        return sum(done.values is None for done in self.dense.values()) + \
            (len(self.sparse.in_place) if self.sparse else 0)

    @property
    def conflicts(self) -> list:
        """(slot, ver, switch) where the sparse placement could not hold every round."""
        return self.sparse.conflicts if self.sparse else []


class Carry(Protocol):
    algorithm: str                  # the scheme it carries for (ground/schemes.py)

    # the first round's reads give the snapshot everything it needs when no switch is dead: a
    # bulk reroute then resets in the freeze's batch and preloads in the next (two rounds, not
    # three). Not with a dead switch: a dead root's results are read from the live switches
    # below it, which the first reads do not cover (bulk.py falls back to three
    # rounds); nor for the sparse carry where batches are atomic (software switches), which
    # reads the holders' values in a second round. Where they are not (BMv2) the values come
    # from value_reads() with the new trees' batches, for either carry (bulk.py)
    complete_ahead: bool

    def snapshot(self, clients: dict[str, SwitchClient], old: Installation,
                 tree_of_slot: list[int], regs: dict | None = None, values: dict | None = None,
                 down=frozenset(), keep: dict | None = None, new: tuple | None = None) -> Carried:
        """Read, after the freeze, what the old tree holds that a worker may still need
        (`regs`: switch -> register -> whole register, `values`: lanes register -> switch ->
        r -> its K cells, both from the first round's reads, first_reads()), from its live
        switches (`down`: dead switches, whose registers died with them); what they lack is
        read here. `keep`: switch -> agg_values slot versions left in place (failover.kept_rows);
        `new`: (new installation, new tree_of_slot), where the preload will put what is
        carried, so that values a switch already holds there are kept too (Carried.kept)."""

    def preload(self, clients: dict[str, SwitchClient], new: Installation, tree_of_slot: list[int],
                carried: Carried) -> int:
        """Write it into the new tree (after the reset and install); register cells written."""

    def preload_lines(self, clients: dict[str, SwitchClient], new: Installation, tree_of_slot: list[int],
                      carried: Carried) -> tuple[dict, int]:
        """preload() as command lines per switch (to go out with other work), and the cells."""

    def preload_cells(self, new: Installation, tree_of_slot: list[int], carried: Carried) -> list:
        """preload() as failover.CellWrites (lines_for(switch, client) builds one switch's)."""

    def first_reads(self, old: Installation, tree_of_slot: list[int], down=frozenset(),
                    values: bool = True) -> dict[str, dict[str, list]]:
        """Per switch, register -> cell runs the snapshot reads; a bulk caller reads them in
        the freeze's batch (a switch's state is final once it answered its freeze) and passes
        them to snapshot(..., regs=, values=) (parse_reads). Without `values`, the per-slot
        registers only: value_reads() then says which values the snapshot needs."""

    def value_reads(self, regs: dict, old: Installation, tree_of_slot: list[int], down=frozenset(),
                    keep: dict | None = None, new: tuple | None = None) -> tuple[dict, dict]:
        """(per switch, register -> cell runs: the values the snapshot needs once the
        first_reads(values=False) registers (`regs`) say which slot versions are held and
        `keep` which of them stay in place; read before the reset, passed as snapshot's values;
        per switch, lanes register -> slot versions the reset leaves alone: Carried.kept as
        snapshot(..., keep=keep, new=new) will find it). With no switch down, these reads are
        all the snapshot needs: the reset can go right behind them."""

    def read_lines(self, client: SwitchClient, want: dict[str, list]) -> list[str]:
        """One switch's command lines reading `want` (register -> cell runs, first_reads)."""

    def parse_reads(self, client: SwitchClient, want: dict[str, list], answers: list, regs: dict,
                    values: dict, sw: str) -> None:
        """Parse a switch's answers to read_lines(want) into regs / values for snapshot()."""


class DenseCarry:
    algorithm = "switchml"
    complete_ahead = True

    def __init__(self, slot_base: int = 0):
        self.slot_base = slot_base            # the job's slot range starts here (jobs share switches)

    def snapshot(self, clients, old, tree_of_slot, regs: dict | None = None,
                 values: dict | None = None, down=frozenset(), keep: dict | None = None,
                 new: tuple | None = None) -> Carried:
        dense = failover.snapshot(clients, old, tree_of_slot, self.slot_base, regs=regs,
                                  values=(values or {}).get("agg_values"), down=down, keep=keep)
        kept = {sw: {"agg_values": set(rows)} for sw, rows in (keep or {}).items()}
        return Carried(dense=dense, kept=kept)

    def first_reads(self, old, tree_of_slot, down=frozenset(), values: bool = True) -> dict[str, dict[str, list]]:
        return failover.first_reads(old, tree_of_slot, self.slot_base, down, values)

    def value_reads(self, regs, old, tree_of_slot, down=frozenset(), keep: dict | None = None,
                    new: tuple | None = None) -> tuple[dict, dict]:
        """The held slot versions' agg_values (holders.held_value_runs): on BMv2, where a read
        is a whole register or single cells, a few hundred single reads instead of a 1 MB
        whole-register read per old root."""
        reads = {sw: {"agg_values": runs} for sw, runs in
                 failover.held_value_runs(regs, old, tree_of_slot, self.slot_base, down, keep).items()}
        return reads, {sw: {"agg_values": set(rows)} for sw, rows in (keep or {}).items()}

    def read_lines(self, client, want: dict[str, list]) -> list[str]:
        """One switch's lines reading `want` (register -> cell runs, from first_reads)."""
        return failover.read_runs_lines(client, want)

    def parse_reads(self, client, want: dict[str, list], answers: list, regs: dict, values: dict,
                    sw: str) -> None:
        """Parse a switch's answers to read_lines(want) into regs / values for snapshot()."""
        failover.parse_first_reads(client, want, answers, regs, values, sw)

    def preload(self, clients, new, tree_of_slot, carried: Carried) -> int:
        lines, writes = self.preload_lines(clients, new, tree_of_slot, carried)
        failover.send_lines(clients, lines)
        return writes

    def preload_lines(self, clients, new, tree_of_slot, carried: Carried) -> tuple[dict, int]:
        lines: dict[str, list[str]] = {}
        cells = self.preload_cells(new, tree_of_slot, carried)
        for writes in cells:
            for sw, batch in writes.lines(clients).items():
                lines.setdefault(sw, []).extend(batch)
        return lines, sum(writes.count for writes in cells)

    def preload_cells(self, new, tree_of_slot, carried: Carried) -> list:
        return [failover.preload_cells(new, tree_of_slot, carried.dense, self.slot_base)]


class SparseCarry(DenseCarry):
    algorithm = "omnireduce"
    # the holders' sp_values are read in a second round, once the first round's scalars say
    # which switch holds which round (a held round may be anywhere in the tree); so the reset
    # waits for the last round. Reading every live switch's whole sp_values window in the
    # first round instead (16,384 cells each at window 128) took the software switches and
    # the controller longer than the extra round does now that a held switch answers at once
    # (bulk.py): first round 25-35 ms against 8-14 ms, on the loaded 2-core machine. On BMv2
    # the scalars are answered before the new trees' batches go out, so value_reads() reads
    # just the held rounds' sp_values with them, and the reset follows in the same batch
    complete_ahead = False

    def snapshot(self, clients, old, tree_of_slot, regs: dict | None = None,
                 values: dict | None = None, down=frozenset(), keep: dict | None = None,
                 new: tuple | None = None) -> Carried:
        carried = super().snapshot(clients, old, tree_of_slot, regs, values, down, keep)   # the lead rounds
        carried.sparse = sparse_failover.sparse_snapshot(clients, old, tree_of_slot, self.slot_base, regs=regs,
                                                         values=(values or {}).get("sp_values"), down=down,
                                                         new=new)
        for sw, r in carried.sparse.in_place:
            carried.kept.setdefault(sw, {}).setdefault("sp_values", set()).add(r)
        return carried

    def value_reads(self, regs, old, tree_of_slot, down=frozenset(), keep: dict | None = None,
                    new: tuple | None = None) -> tuple[dict, dict]:
        """The dense carry's, and the held rounds' sp_values that sparse_snapshot(new=new) will
        want (sparse_value_reads: the same walk over the same scalars), with the sp_values it
        will keep in place: on BMv2 the holders' values then go with the new trees' batches
        and the reset with them, instead of a round of their own (round 2) before the reset."""
        reads, kept = super().value_reads(regs, old, tree_of_slot, down, keep, new)
        runs, in_place = sparse_failover.sparse_value_reads(regs, old, tree_of_slot, self.slot_base, down, new)
        for sw, cells in runs.items():
            reads.setdefault(sw, {})["sp_values"] = cells
        for sw, rows in in_place.items():
            kept.setdefault(sw, {})["sp_values"] = rows
        return reads, kept

    def first_reads(self, old, tree_of_slot, down=frozenset(), values: bool = True) -> dict[str, dict[str, list]]:
        """The dense reads, and the sparse scalars of the window of every live switch of the
        old tree."""
        reads = super().first_reads(old, tree_of_slot, down, values)
        window = len(tree_of_slot)
        for sw in sorted({sw for sw, _ in old.roles} - set(down)):
            for name in sparse_failover.SNAPSHOT_SCALARS:
                failover.add_reads(reads, sw, name, failover.window_runs(window, self.slot_base))
        return reads

    def preload_cells(self, new, tree_of_slot, carried: Carried) -> list:
        return super().preload_cells(new, tree_of_slot, carried) + [
            sparse_failover.sparse_preload_cells(new, tree_of_slot, carried.sparse, self.slot_base)]

