"""Carry a running dense allreduce across a tree change without losing a contribution.

The protocol (docs/design/reroute.md, "Epochs"): freeze the old epoch, snapshot per slot the
version the old root completed but some worker may not have seen, reset the new
tree's state and preload that version as complete, then tell the agents. A lagging
worker's retransmission is then answered (by the root, through the tree) with the
result it missed; everything incomplete is rebuilt from the workers' retransmissions
under the new epoch.

The job calls this through controller/reroute/carry.py (DenseCarry), which picks it or the
sparse pipeline's carry (controller/reroute/sparse_failover.py) by the allreduce algorithm;
`reset` and `write_preload` here serve both.
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass

import numpy as np

from agglab.ground import wire
from agglab.controller.switch_batches import on_each, read_ranges, run_batches
from agglab.controller.switch_client import SwitchClient
from agglab.controller.tree_install import Installation
from agglab.controller.reroute.holders import (DEAD_ROOT_SCALARS, SNAPSHOT_SCALARS, find_holders,  # noqa: F401  re-exported
                                              held_value_runs, slot_index, snapshot_reads)

# Everything a reset zeroes: the dense registers and the sparse pipeline's (p4src/include/sparse.p4);
# sp_next must be 0 on a new tree so a round waits until every child has announced again.
REGISTERS = ("agg_values", "agg_bitmap", "agg_count", "agg_exp", "agg_final", "agg_block", "agg_rnext",
             "sp_values", "sp_block", "sp_bitmap", "sp_final", "sp_exp", "sp_rnext", "sp_done",
             "sp_ack", "sp_held", "sp_next", "sp_exp_next")


@dataclass
class CompletedVersion:
    slot: int
    ver: int
    exp: int
    values: np.ndarray | None   # K unsigned 32-bit register values; None: in place (`holder`'s, kept)
    block: int = 0           # agg_block: the round's block (so a later carry can tell rounds apart)
    rnext: int = 0           # agg_rnext: the result's next_block (a sparse lead's first round)
    holder: str = ""         # the switch the result was found at


def read_registers(client: SwitchClient, names) -> dict[str, np.ndarray]:
    """Whole registers, in one batch where the switch's batches are atomic."""
    if not client.atomic_batches:
        return {name: np.array(client.register_read(name), dtype=np.int64) for name in names}
    return parse_reads(names, client.commands(read_lines(names)))


def window_runs(window: int, slot_base: int = 0, per: int = 1) -> list[tuple[int, int]]:
    """Cell runs of both versions of the first `window` slots of a register with `per` cells
    per slot version (1, or K for the lanes registers)."""
    return [(slot_index(ver, slot_base, 0) * per, window * per) for ver in (0, 1)]


def add_reads(reads: dict, sw: str, name: str, runs) -> None:
    """reads[sw][name] += runs (a first round's reads: switch -> register -> cell runs)."""
    have = reads.setdefault(sw, {}).setdefault(name, [])
    have += [run for run in runs if run not in have]


def first_reads(inst: Installation, tree_of_slot: list[int], slot_base: int = 0,
                down=frozenset(), values: bool = True) -> dict[str, dict[str, list]]:
    """The dense carry's reads for a bulk reroute's first round, per switch and register as
    cell runs: the snapshot_reads() registers (window slots, both versions) and, with
    `values`, the agg_values of every window slot version at the live old roots
    (values_ahead_runs; without, the holders' alone are read once these registers say which,
    held_value_runs)."""
    reads: dict[str, dict[str, list]] = {}
    window = len(tree_of_slot)
    for sw, names in snapshot_reads(inst, tree_of_slot, down).items():
        for name in names:
            add_reads(reads, sw, name, window_runs(window, slot_base))
    if not values:
        return reads
    for sw, runs in values_ahead_runs(inst, tree_of_slot, slot_base, down).items():
        add_reads(reads, sw, "agg_values", [(r0 * wire.K, n * wire.K) for r0, n in runs])
    return reads


def read_groups(reads: dict[str, list]) -> list[tuple[list[str], list]]:
    """One switch's reads (register -> runs) as (registers, runs) groups of the registers read
    at the same cells, in order: each group is one command on the software switch."""
    groups: dict[tuple, list[str]] = {}
    for name, runs in reads.items():
        groups.setdefault(tuple(runs), []).append(name)
    return [(names, list(runs)) for runs, names in groups.items()]


def read_runs_lines(client: SwitchClient, reads: dict[str, list]) -> list[str]:
    """The lines that read reads[sw] on `client`'s switch (the software switch: one binary
    register_read_runs per group of registers read at the same cells; BMv2: one
    register_read_range per register and run)."""
    return [line for names, runs in read_groups(reads) for line in client.register_read_group_lines(names, runs)]


def parse_first_reads(client: SwitchClient, reads: dict[str, list], outs: list[str], regs: dict, values: dict,
                      sw: str) -> None:
    """The answers to read_runs_lines(reads) of switch `sw`: a lanes register's cells into
    values[name][sw] (LaneRows: r -> its K cells), any other register into regs[sw][name]
    as a whole (2*SLOTS) register whose cells not read are 0."""
    first = 0
    for names, runs in read_groups(reads):
        lines = len(client.register_read_group_lines(names, runs))
        got = client.parse_read_group(names, runs, outs[first:first + lines])
        first += lines
        for name, cells in got.items():
            if name in PER_VERSION_LANES:
                values.setdefault(name, {})[sw] = LaneRows(runs, cells)
                continue
            full = regs.setdefault(sw, {}).setdefault(name, np.zeros(2 * wire.SLOTS, dtype=np.int64))
            at = 0
            for start, count in runs:
                full[start:start + count] = cells[at:at + count]
                at += count


class LaneRows:
    """r -> the K cells of slot version r, over the cells read for runs of whole slot versions
    (a read-only mapping; building a dict of 16,384 rows per switch cost milliseconds)."""

    def __init__(self, runs, cells: np.ndarray):
        self._runs, at = [], 0
        for start, count in runs:
            if start % wire.K or count % wire.K:
                raise ValueError(f"lanes run {start}+{count} is not whole slot versions")
            self._runs.append((start // wire.K, count // wire.K, cells[at:at + count].reshape(-1, wire.K)))
            at += count
        self._runs.sort(key=lambda run: run[0])
        self._starts = [r0 for r0, _, _ in self._runs]      # a run per slot version, when trees interleave

    def _run(self, r):
        i = bisect.bisect_right(self._starts, r) - 1
        if i >= 0:
            r0, n, rows = self._runs[i]
            if r < r0 + n:
                return rows[r - r0]
        return None

    def __contains__(self, r) -> bool:
        return self._run(r) is not None

    def __getitem__(self, r) -> np.ndarray:
        row = self._run(r)
        if row is None:
            raise KeyError(r)
        return row

    def get(self, r, default=None):
        return self[r] if r in self else default


def read_lines(names) -> list[str]:
    return [f"register_read {name}" for name in names]


def parse_reads(names, outs: list[str]) -> dict[str, np.ndarray]:
    """The answers to read_lines(names)."""
    return {name: np.array([int(v) for v in re.findall(r"-?\d+", out.split("=", 1)[1] if "=" in out else out)],
                           dtype=np.int64) for name, out in zip(names, outs)}


def values_ahead_runs(inst: Installation, tree_of_slot: list[int], slot_base: int = 0,
                      down=frozenset()) -> dict[str, list]:
    """Per old live root, its slots' versions as runs of consecutive slot versions:
    {root: [(r0, n), ...]} (their agg_values are read with the freeze, so that a dense
    reroute needs no second read; window 128: 16,384 cells in all). A dead root (`down`) is
    skipped: its slots' results are wherever snapshot() finds them below it."""
    roots = {tree: role.switch for (_sw, tree), role in inst.roles.items() if role.root}
    rs: dict[str, list[int]] = {}
    for slot, tree in enumerate(tree_of_slot):
        if roots[tree] in down:
            continue
        for ver in (0, 1):
            rs.setdefault(roots[tree], []).append(slot_index(ver, slot_base, slot))
    runs: dict[str, list] = {}
    for sw, items in rs.items():
        out = runs[sw] = []
        for r in sorted(items):
            if out and out[-1][0] + out[-1][1] == r:
                out[-1] = (out[-1][0], out[-1][1] + 1)
            else:
                out.append((r, 1))
    return runs


def kept_rows(old: Installation, old_tree_of_slot: list[int], new: Installation, new_tree_of_slot: list[int],
              slot_base: int = 0, down=frozenset()) -> dict[str, set[int]]:
    """Per switch, the slot versions r whose agg_values a reroute leaves where they are: the
    slots whose new tree is rooted at the live switch their old tree was rooted at. A result
    the old root holds there is the one the new root needs at the same cells (r depends on
    the slot and version only), so it is neither read, nor reset, nor written back (on BMv2,
    8,192 single Thrift writes for a window of 128). What such a cell holds when the slot
    carries nothing is harmless: the first contribution to a round overwrites the lanes
    (aggregate.p4's keep mask), and nothing reads them before."""
    old_roots = {t: role.switch for (_sw, t), role in old.roles.items() if role.root}
    new_roots = {t: role.switch for (_sw, t), role in new.roles.items() if role.root}
    rows: dict[str, set[int]] = {}
    for slot, (t_old, t_new) in enumerate(zip(old_tree_of_slot, new_tree_of_slot)):
        sw = old_roots.get(t_old)
        if sw is not None and sw not in down and new_roots.get(t_new) == sw:
            rows.setdefault(sw, set()).update(slot_index(ver, slot_base, slot) for ver in (0, 1))
    return rows


def drop_rows(runs, rows, per: int = wire.K) -> list[tuple[int, int]]:
    """Cell runs [(start, count)] of whole slot versions (`per` cells each) without those of
    the slot versions `rows`."""
    out: list[tuple[int, int]] = []
    for start, count in runs:
        for r in range(start // per, (start + count) // per):
            if r in rows:
                continue
            if out and out[-1][0] + out[-1][1] == r * per:
                out[-1] = (out[-1][0], out[-1][1] + per)
            else:
                out.append((r * per, per))
    return out


def snapshot(clients: dict[str, SwitchClient], inst: Installation, tree_of_slot: list[int],
             slot_base: int = 0, regs: dict | None = None, values: dict | None = None,
             down=frozenset(), keep: dict | None = None) -> dict[int, CompletedVersion]:
    """Per slot, the complete-and-maybe-needed version at its old tree's root (if any).
    `keep`: switch -> slot versions left in place (kept_rows): such a version is carried
    with values None (its holder keeps them) and never read.
    `regs`: the registers of snapshot_reads(), if already read (after the switches' freeze);
    `values`: switch -> r -> agg_values cells, if already read (values_ahead_runs, or the
    holders' alone, held_value_runs); a holder whose cells are not all there is read here.
    A dead root (`down`: its registers died with it) is stood in for by the live switches
    of its tree (holders.find_holders says which switch holds what)."""
    need = snapshot_reads(inst, tree_of_slot, down)
    cache = dict(regs or {})
    missing = [sw for sw, names in need.items() if not all(n in cache.get(sw, {}) for n in names)]
    cache.update(on_each(clients, missing, lambda sw: read_registers(clients[sw], need[sw])))

    def reg(sw: str, name: str) -> np.ndarray:
        return cache[sw][name]

    wanted = find_holders(reg, inst, tree_of_slot, slot_base, down)      # holder -> [(slot, ver, r)]
    values = values or {}
    keep = keep or {}
    found: dict[int, CompletedVersion] = {}

    def carried(sw: str, slot: int, ver: int, r: int, vals) -> None:
        found[slot] = CompletedVersion(slot, ver, int(reg(sw, "agg_exp")[r]), vals, int(reg(sw, "agg_block")[r]),
                                       int(reg(sw, "agg_rnext")[r]), holder=sw)

    for sw in list(wanted):
        kept = keep.get(sw, ())
        for slot, ver, r in (item for item in wanted[sw] if item[2] in kept):
            carried(sw, slot, ver, r, None)
        wanted[sw] = [item for item in wanted[sw] if item[2] not in kept]
    missing = [sw for sw, items in wanted.items() if any(r not in values.get(sw, {}) for *_, r in items)]
    read = read_ranges(clients, "agg_values", {sw: [(r * wire.K, wire.K) for _, _, r in wanted[sw]]
                                               for sw in missing})     # one batch per holder, all at once
    for sw, items in wanted.items():
        cells = read[sw] if sw in read else [values[sw][r] for *_, r in items]
        for (slot, ver, r), vals in zip(items, cells):
            carried(sw, slot, ver, r, np.array(vals))
    return found


# Register layouts (aggregate.p4, sparse.p4): cells per slot version, or per slot and child.
PER_VERSION_LANES = ("agg_values", "sp_values")                   # r*K + lane
PER_CHILD = ("sp_next", "sp_exp_next")                            # (slot_base+slot)*MAX_WORKERS + child


def reset_lines(client: SwitchClient | None = None, slots: tuple[int, int] | None = None,
                skip: dict | None = None) -> list[str]:
    """What reset() sends to a switch: every register reset (a job alone on its switches), or,
    with `slots` = (first, count), zeros written to those slots' cells only, both versions
    (jobs sharing the switches: another job's slots are never written). `skip`: lanes
    register -> slot versions whose lanes stay as they are (a reroute's results kept in
    place, kept_rows; only with `slots`)."""
    if slots is None:
        return client.register_reset_lines(REGISTERS) if client else [f"register_reset {name}" for name in REGISTERS]
    lines: list[str] = []
    skip = skip or {}
    for name in REGISTERS:
        if name in PER_CHILD:
            ranges = [(slots[0] * wire.MAX_WORKERS, slots[1] * wire.MAX_WORKERS)]
        else:
            per = wire.K if name in PER_VERSION_LANES else 1
            ranges = [(slot_index(ver, slots[0], 0) * per, slots[1] * per) for ver in (0, 1)]
            if skip.get(name):
                ranges = drop_rows(ranges, skip[name], per)
        for start, count in ranges:
            lines += client.register_fill_lines(name, start, count, 0)
    return lines


def reset(clients: dict[str, SwitchClient], switches, slots: tuple[int, int] | None = None) -> None:
    """Zero the aggregation registers: all of them (a job alone on its switches), or only the
    cells of `slots` = (first, count) (see reset_lines)."""
    for sw in switches:
        clients[sw].commands(reset_lines(clients[sw], slots))


def preload(clients: dict[str, SwitchClient], inst: Installation, tree_of_slot: list[int],
            completed: dict[int, CompletedVersion], slot_base: int = 0) -> int:
    """Write the completed versions into the new tree: full result at its root, complete
    bitmap/count everywhere (so duplicates are answered). Returns register cells written."""
    lines, writes = preload_lines(clients, inst, tree_of_slot, completed, slot_base)
    send_lines(clients, lines)
    return writes


def preload_lines(clients: dict[str, SwitchClient], inst: Installation, tree_of_slot: list[int],
                  completed: dict[int, CompletedVersion], slot_base: int = 0) -> tuple[dict, int]:
    """preload() as command lines per switch, and the register cells they write."""
    cells = preload_cells(inst, tree_of_slot, completed, slot_base)
    return cells.lines(clients), cells.count


def preload_cells(inst: Installation, tree_of_slot: list[int], completed: dict[int, CompletedVersion],
                  slot_base: int = 0) -> "CellWrites":
    cells = CellWrites()
    roles_of: dict[int, list] = {}
    for (sw, t), role in inst.roles.items():
        roles_of.setdefault(t, []).append((sw, role))
    for slot, done in completed.items():
        # EXERCISE carry-preload BEGIN hint: at r = slot_index(done.ver, slot_base, slot), every switch (sw, role) of the slot's new tree (roles_of[tree_of_slot[slot]]) must see the version as complete, so a resend is answered as a duplicate: cells.put_cells(sw, r, {...}) with agg_count = its fan-in len(role.children), agg_bitmap = every child's bit, agg_block = done.block; the new root also agg_exp, agg_final = 1, agg_rnext, and the K lanes with cells.put_lanes(sw, "agg_values", r, done.values) unless done.values is None (kept in place: done.holder must then be that root)
        r = slot_index(done.ver, slot_base, slot)
        for sw, role in roles_of.get(tree_of_slot[slot], []):
            fan_in = len(role.children)
            if role.root:
                cells.put_cells(sw, r, {"agg_count": fan_in, "agg_bitmap": (1 << fan_in) - 1, "agg_block": done.block,
                                        "agg_exp": done.exp, "agg_final": 1, "agg_rnext": done.rnext})
                if done.values is not None:
                    cells.put_lanes(sw, "agg_values", r, done.values)
                elif done.holder != sw:           # kept_rows keeps a result only at its new root
                    raise ValueError(f"slot {slot}: result kept at {done.holder}, new root {sw}")
            else:
                cells.put_cells(sw, r, {"agg_count": fan_in, "agg_bitmap": (1 << fan_in) - 1, "agg_block": done.block})
        # EXERCISE END
    return cells


class CellWrites:
    """A preload's register cells per switch (a cell written twice keeps the later value).
    lines() gives each switch's as its client's lines, sorted: the registers written at the
    same cells together (register_write_group_lines: one binary command on the software
    switch), the lanes registers apart (register_write_cells_lines); BMv2's range or single
    writes. Cells are kept as rows, index -> {register: value}, one per slot version and switch
    as a preload puts them (some 3,000 a reroute: per-register dicts cost several times more)."""

    def __init__(self):
        self.rows: dict[str, dict[int, dict[str, int]]] = {}       # sw -> index -> name -> value
        self.lanes: dict[str, dict[str, dict[int, object]]] = {}   # sw -> name -> r -> K values
        self.count = 0                                               # cells written

    def put(self, sw: str, name: str, index: int, value: int) -> None:
        self.put_cells(sw, index, {name: value})

    def put_cells(self, sw: str, index: int, values: dict[str, int]) -> None:
        """Cell `index` of several registers of switch `sw` (name -> value; the dict is kept)."""
        rows = self.rows.get(sw)
        if rows is None:
            rows = self.rows[sw] = {}
        row = rows.get(index)
        if row is None:
            rows[index] = values
        else:
            row.update(values)
        self.count += len(values)

    def put_lanes(self, sw: str, name: str, r: int, values) -> None:
        """The K lanes of slot version r (cells r*K .. r*K+K-1), as unsigned 32-bit values."""
        self.lanes.setdefault(sw, {}).setdefault(name, {})[r] = values
        self.count += wire.K

    def switches(self) -> set[str]:
        return set(self.rows) | set(self.lanes)

    def lines_for(self, sw: str, client: SwitchClient) -> list[str]:
        """Switch `sw`'s writes as `client`'s lines (so a caller can send each switch its
        batch as soon as it is built)."""
        out: list[str] = []
        rows = self.rows.get(sw, {})
        groups: dict[tuple, list[int]] = {}          # registers written at the same cells: one line
        for index in sorted(rows):
            groups.setdefault(tuple(rows[index]), []).append(index)
        for names, idx in groups.items():
            out += client.register_write_group_lines(list(names), idx, [[rows[i][n] for i in idx] for n in names])
        for name, lanes in self.lanes.get(sw, {}).items():
            rs = sorted(lanes)
            idx = (np.asarray(rs, dtype=np.int64)[:, None] * wire.K + np.arange(wire.K)).ravel()
            vals = np.asarray([lanes[r] for r in rs], dtype=np.int64).reshape(-1) & 0xFFFFFFFF
            out += client.register_write_cells_lines(name, idx, vals)
        return out

    def lines(self, clients: dict[str, SwitchClient]) -> dict[str, list[str]]:
        return {sw: self.lines_for(sw, clients[sw]) for sw in sorted(self.switches())}


def coalesce_writes(client: SwitchClient, lines: list[str]) -> list[str]:
    """`register_write NAME INDEX VALUE` lines as the client's range writes over runs of
    consecutive indices (the software switch: one command per run instead of one per cell;
    BMv2: the same single writes). A cell written twice keeps the later value, as in order."""
    cells: dict[str, dict[int, str]] = {}
    for line in lines:
        _, name, index, value = line.split()
        cells.setdefault(name, {})[int(index)] = value
    out = []
    for name, written in cells.items():
        run: list[str] = []
        for index in sorted(written):
            if run and index != start + len(run):
                out += client.register_write_range_lines(name, start, run)
                run = []
            if not run:
                start = index
            run.append(written[index])
        if run:
            out += client.register_write_range_lines(name, start, run)
    return out


def write_preload(clients: dict[str, SwitchClient], cells: CellWrites) -> int:
    """Send a preload as one pipelined batch per switch; cells written."""
    send_lines(clients, cells.lines(clients))
    return cells.count


def send_lines(clients: dict[str, SwitchClient], lines: dict[str, list[str]]) -> None:
    if all(clients[sw].pipelined_batches for sw in lines):
        run_batches(clients, lines)
    else:
        for sw, batch in lines.items():
            clients[sw].commands(batch)          # one pipelined batch per switch
