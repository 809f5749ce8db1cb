"""One control interface, two data planes.

Both targets are programmed in the simple_switch_CLI command language, so the
conformance vectors, the controller and a human at a CLI use one vocabulary:
- SoftSwitchClient talks to the software switch's Unix control socket;
- Bmv2Client (controller/bmv2_client.py) talks Thrift to simple_switch, through
  p4-utils' SimpleSwitchThriftAPI when installed, else BMv2's own runtime_CLI module,
  else the simple_switch_CLI program.
Typed helpers (table_add, register_read, ...) are built once on top of command(); batches
to many switches at once (a reroute's rounds) are controller/switch_batches.py.
"""

from __future__ import annotations

import base64
import re
from abc import ABC, abstractmethod
from typing import Callable

import numpy as np

from agglab.softswitch.control import ControlClient, SwitchCommandError as SoftError, wait_ready

class SwitchCommandError(RuntimeError):
    """A control command was rejected by the switch."""


class SwitchClient(ABC):
    name: str = "?"
    # True when a commands() batch runs between two packets (no packet sees half of it) and
    # text table_add/mc_node_create lines answer with their handles: the software switch's
    # one event loop. A reroute then needs no drain and goes out as bulk batches
    # (controller/reroute/bulk.py); BMv2's pipeline threads do not give that.
    atomic_batches: bool = False
    # True when send_commands() really sends before it reads (software switch; BMv2 over
    # Thrift), so that a reroute's rounds reach every switch at once (controller/reroute/bulk.py)
    pipelined_batches: bool = False
    # True when a whole-register reset costs next to nothing (the software switch's numpy
    # arrays); BMv2 clears every cell of a register, so a job resets only its window there
    cheap_register_reset: bool = False

    @abstractmethod
    def command(self, line: str) -> str:
        """Run one CLI command and return its output; raise SwitchCommandError on failure."""

    def commands(self, lines: list[str]) -> list[str]:
        return [self.command(line) for line in lines]

    def send_commands(self, lines: list[str]) -> Callable[[], list[str]]:
        """Start a batch; the returned call gives its outputs (raising as commands() would).
        Targets that can, send now and read later, so batches to many switches overlap
        (switch_batches.run_batches); the default runs the batch at once."""
        outs = self.commands(lines)
        return lambda: outs

    # -- typed helpers -------------------------------------------------------------
    def table_add(self, table: str, action: str, keys: list, params: list) -> int:
        return parse_handle(self.name, f"table_add {table}", self.command(table_add_line(table, action, keys, params)))

    def table_clear(self, table: str) -> None:
        self.command(f"table_clear {table}")

    def table_set_default(self, table: str, action: str, params: list = ()) -> None:
        self.command(f"table_set_default {table} {action} {_join(params)}".rstrip())

    def register_read(self, name: str, index: int | None = None) -> int | list[int]:
        out = self.command(f"register_read {name}" + ("" if index is None else f" {index}"))
        body = out.split("=", 1)[1] if "=" in out else out
        values = [int(v) for v in re.findall(r"-?\d+", body)]
        if index is not None:
            if len(values) != 1:
                raise SwitchCommandError(f"{self.name}: cannot parse register_read output {out!r}")
            return values[0]
        return values

    def register_read_range(self, name: str, start: int, count: int) -> list[int]:
        """Values [start, start+count) (per-index reads here; the soft switch has one command)."""
        outs = self.commands([f"register_read {name} {i}" for i in range(start, start + count)])
        return [int(o.rsplit("=", 1)[1]) for o in outs]

    def register_read_ranges(self, name: str, ranges: list[tuple[int, int]]) -> list[list[int]]:
        """Several (start, count) ranges; targets override with their cheapest form."""
        return [self.register_read_range(name, start, count) for start, count in ranges]

    def register_write_range(self, name: str, start: int, values) -> None:
        self.commands(self.register_write_range_lines(name, start, values))

    def register_write_range_lines(self, name: str, start: int, values) -> list[str]:
        """The command lines that write `values` from `start` (batched by the caller)."""
        return [f"register_write {name} {start + i} {int(v)}" for i, v in enumerate(values)]

    def register_fill_lines(self, name: str, start: int, count: int, value: int = 0) -> list[str]:
        """The command lines that set `count` cells from `start` to `value` (a window's reset)."""
        return self.register_write_range_lines(name, start, [value] * count)

    def register_write_cells_lines(self, name: str, index, values) -> list[str]:
        """Lines that write `values[i]` to cell `index[i]` of register `name` (a cell named
        twice keeps its later value). Here as range writes over runs of consecutive cells
        (BMv2: bm_register_write_range or single writes); the software switch sends one
        binary command per register (soft_write_cells_lines)."""
        index, values = last_writes(index, values)
        return [line for start, count, offset in _runs_with_offsets(index)
                for line in self.register_write_range_lines(name, start, values[offset:offset + count].tolist())]

    def register_write_group_lines(self, names, index, columns) -> list[str]:
        """Lines that write, for each register names[k], columns[k][i] to cell index[i] (several
        registers at the same cells: a preload's slot versions); `index` strictly increasing.
        Here each register's register_write_cells_lines; the software switch sends one
        binary command for them all (soft_write_group_lines)."""
        return [line for name, values in zip(names, columns) for line in self.register_write_cells_lines(name, index, values)]

    def register_read_runs_lines(self, name: str, runs) -> list[str]:
        """Lines that read the cells of `runs` [(start, count), ...] of register `name`, to be
        sent in a batch and given back to parse_read_runs: here one `register_read_range` per
        run (BMv2 translates it); the software switch sends one binary command."""
        return [f"register_read_range {name} {start} {count}" for start, count in runs]

    def parse_read_runs(self, runs, outs: list[str]) -> np.ndarray:
        """The cells (int64, in the runs' order) of the answers to register_read_runs_lines."""
        return np.concatenate([np.asarray(_cells(out, count), dtype=np.int64)
                               for out, (_start, count) in zip(outs, runs)])

    def register_read_group_lines(self, names, runs) -> list[str]:
        """Lines that read the cells of `runs` of several registers (a reroute's snapshot reads
        a dozen at the same cells): here each one's register_read_runs_lines; the software
        switch reads them all in one command."""
        return [line for name in names for line in self.register_read_runs_lines(name, runs)]

    def parse_read_group(self, names, runs, outs: list[str]) -> dict[str, np.ndarray]:
        """The answers to register_read_group_lines: name -> its cells (int64, runs' order)."""
        got, first = {}, 0
        for name in names:
            lines = len(self.register_read_runs_lines(name, runs))
            got[name] = self.parse_read_runs(runs, outs[first:first + lines])
            first += lines
        return got

    def register_write(self, name: str, index: int, value: int) -> None:
        self.command(f"register_write {name} {index} {value}")

    def register_reset(self, name: str) -> None:
        self.command(f"register_reset {name}")

    def counter_read(self, name: str, index: int) -> int:
        """Packets counted at index."""
        return parse_counter(self.name, self.command(f"counter_read {name} {index}"))

    def mc_group(self, group: int, ports: list[int], rid: int = 0) -> int:
        """Create multicast group `group` replicating to `ports`; returns the node handle."""
        self.command(f"mc_mgrp_create {group}")
        out = self.command(f"mc_node_create {rid} {_join(sorted(ports))}")
        match = re.search(r"handle (\d+)", out)
        if not match:
            raise SwitchCommandError(f"{self.name}: mc_node_create: {out.strip()}")
        handle = int(match.group(1))
        self.command(f"mc_node_associate {group} {handle}")
        return handle

    def pids(self) -> list[int]:
        """Local processes that run this switch's data plane, if known (ground/priority.py
        raises them for a reroute); none here."""
        return []

    def register_reset_lines(self, names) -> list[str]:
        """Lines that reset the registers `names` (here one `register_reset` each; the software
        switch takes them all in one)."""
        return [f"register_reset {name}" for name in names]

    def table_delete_lines(self, table: str, handles) -> list[str]:
        """Lines that delete the entries `handles` of `table` (here one `table_delete` each; the
        software switch takes them all in one)."""
        return [f"table_delete {table} {h}" for h in handles]

    def hold_lines(self, ms: float) -> list[str]:
        """Lines that make the switch serve nothing but its control socket for at most `ms`
        ms (frames wait in the kernel's queues; a reroute's rounds are then answered at
        once), or none where the target has no such thing (BMv2)."""
        return []

    def release_lines(self) -> list[str]:
        """Lines that end a hold_lines() hold before its time."""
        return []

    def close(self) -> None:
        pass


def _cells(out: str, count: int) -> list[int]:
    """The values of a software switch's `register_read_range` answer (parsed in C)."""
    cells = np.fromstring(out.split("=", 1)[1], dtype=np.int64, sep=",")
    if cells.size != count:
        raise SwitchCommandError(f"register_read_range: {cells.size} values, {count} asked: {out[:80]!r}")
    return cells.tolist()


def last_writes(index, values) -> tuple[np.ndarray, np.ndarray]:
    """(index, values) sorted by index, each index once with its last value."""
    index = np.asarray(index, dtype=np.int64)
    values = np.asarray(values, dtype=np.int64)
    if index.shape != values.shape:
        raise ValueError(f"{index.size} cells but {values.size} values")
    if index.size < 2 or bool((index[1:] > index[:-1]).all()):
        return index, values                 # already sorted, each cell once (the usual case)
    rev_index, first = np.unique(index[::-1], return_index=True)   # first in reverse = last written
    return rev_index, values[::-1][first]


def _runs_with_offsets(index: np.ndarray) -> list[tuple[int, int, int]]:
    """(start, count, offset into index) of each run of consecutive cells in sorted `index`."""
    if index.size == 0:
        return []
    breaks = np.flatnonzero(np.diff(index) != 1) + 1
    starts = np.concatenate(([0], breaks))
    ends = np.concatenate((breaks, [index.size]))
    return [(int(index[a]), int(b - a), int(a)) for a, b in zip(starts, ends)]


def runs_text(runs) -> str:
    """The RUNS argument of the software switch's register_read_runs/register_write_runs."""
    return ",".join(f"{start}+{count}" for start, count in runs)


def read_runs_line(name: str, runs) -> str:
    """Software switch: the cells of `runs` [(start, count), ...] of register `name`, in one
    command (answer: "T:BASE64", the cells as little-endian numpy type T; cells_of_runs)."""
    return f"register_read_runs {name} {runs_text(runs)}"


def cells_of_runs(out: str, runs) -> np.ndarray:
    """The cells of a register_read_runs answer as int64, checked against the runs asked."""
    code, _, text = out.partition(":")
    cells = np.frombuffer(base64.b64decode(text), dtype="<" + code).astype(np.int64)
    want = sum(count for _, count in runs)
    if cells.size != want:
        raise SwitchCommandError(f"register_read_runs: {cells.size} values, {want} asked")
    return cells


RUNS_CELLS = 1 << 15          # cells per register_write_runs line (at most 350 kB: the daemon takes 1 MB)
LONG_RUN = 16                 # cells per run from which register_write_runs beats register_write_cells


def soft_write_cells_lines(name: str, index, values) -> list[str]:
    """The software switch's form of SwitchClient.register_write_cells_lines: per RUNS_CELLS
    cells one `register_write_runs` where the cells form long runs, else one
    `register_write_cells` (the indices themselves, binary: a reroute's carried slot versions
    are scattered, and their runs, one per cell, were most of the text to build and to parse
    on both sides); the values as u4 when every one fits, else i8."""
    index, values = last_writes(index, values)
    code = "u4" if values.size and 0 <= values.min() and values.max() <= 0xFFFFFFFF else "i8"
    lines = []
    for first in range(0, index.size, RUNS_CELLS):
        idx = index[first:first + RUNS_CELLS]
        cells = code + ":" + base64.b64encode(values[first:first + RUNS_CELLS].astype("<" + code).tobytes()).decode("ascii")
        runs = 1 + int(np.count_nonzero(np.diff(idx) != 1))
        if runs * LONG_RUN <= idx.size:
            text = runs_text((start, count) for start, count, _ in _runs_with_offsets(idx))
            lines.append(f"register_write_runs {name} {text} {cells}")
        else:
            where = "u4:" + base64.b64encode(idx.astype("<u4").tobytes()).decode("ascii")
            lines.append(f"register_write_cells {name} {where} {cells}")
    return lines


def soft_write_group_lines(names, index, columns) -> list[str]:
    """The software switch's form of SwitchClient.register_write_group_lines: one
    `register_write_cells R1,R2,.. I:BASE64 T:BASE64` per RUNS_CELLS values (where the cells
    are scattered; long runs go as each register's register_write_runs)."""
    index = np.asarray(index, dtype=np.int64)
    values = np.asarray(columns, dtype=np.int64).reshape(len(names), index.size)
    runs = 1 + int(np.count_nonzero(np.diff(index) != 1)) if index.size else 0
    if len(names) < 2 or runs * LONG_RUN <= index.size or (index.size > 1 and not bool((index[1:] > index[:-1]).all())):
        return [line for name, column in zip(names, values) for line in soft_write_cells_lines(name, index, column)]
    code = "u4" if values.size and 0 <= values.min() and values.max() <= 0xFFFFFFFF else "i8"
    step = max(1, RUNS_CELLS // len(names))
    lines = []
    for first in range(0, index.size, step):
        idx = index[first:first + step]
        cells = values[:, first:first + step].astype("<" + code).tobytes()
        lines.append(f"register_write_cells {','.join(names)} u4:" + base64.b64encode(idx.astype("<u4").tobytes()).decode("ascii")
                     + f" {code}:" + base64.b64encode(cells).decode("ascii"))
    return lines


def _join(items) -> str:
    return " ".join(str(x) for x in items)


def table_add_line(table: str, action: str, keys: list, params: list) -> str:
    return f"table_add {table} {action} {_join(keys)} => {_join(params)}".rstrip()


def parse_counter(name: str, out: str) -> int:
    """The packets of a `counter_read` answer; software switch: "BmCounterValue(packets=P,
    bytes=B)", BMv2: "C[i]= (B bytes, P packets)"."""
    match = re.search(r"packets=(\d+)", out) or re.search(r"(\d+) packets", out)
    if not match:
        raise SwitchCommandError(f"{name}: cannot parse counter_read output {out!r}")
    return int(match.group(1))


def parse_handle(name: str, what: str, out: str) -> int:
    """The handle in a table_add or mc_node_create answer."""
    match = re.search(r"handle (\d+)", out)
    if not match:
        raise SwitchCommandError(f"{name}: {what}: {out.strip()}")
    return int(match.group(1))


class SoftSwitchClient(SwitchClient):
    """The software switch's control socket (see softswitch/control.py)."""

    atomic_batches = True
    pipelined_batches = True
    cheap_register_reset = True

    def __init__(self, name: str, socket_path: str, timeout: float = 10.0):
        self.name = name
        self._path = socket_path
        wait_ready(socket_path, timeout)
        self._client = ControlClient(socket_path)

    def reconnect(self) -> None:
        """A new control connection: answers still due on the old one (a batch someone sent
        and never read, when a reroute failed half-way) go with it, instead of being taken
        for the answers of the next command."""
        old, self._client = self._client, ControlClient(self._path)
        old.close()

    def command(self, line: str) -> str:
        try:
            return self._client.command(line)
        except SoftError as exc:
            raise SwitchCommandError(f"{self.name}: {line!r}: {exc}") from exc
        except OSError as exc:                  # the switch died: its socket is gone
            raise SwitchCommandError(f"{self.name}: {line!r}: control connection lost ({exc})") from exc

    def register_read_range(self, name: str, start: int, count: int) -> list[int]:
        return _cells(self.command(f"register_read_range {name} {start} {count}"), count)

    def register_write_range_lines(self, name: str, start: int, values) -> list[str]:
        return [f"register_write_range {name} {start} " + " ".join(map(str, map(int, values)))]

    def register_read_ranges(self, name: str, ranges: list[tuple[int, int]]) -> list[list[int]]:
        if not ranges:
            return []
        cells = cells_of_runs(self.command(read_runs_line(name, ranges)), ranges).tolist()
        out, at = [], 0
        for _start, count in ranges:
            out.append(cells[at:at + count])
            at += count
        return out

    def register_write_cells_lines(self, name: str, index, values) -> list[str]:
        return soft_write_cells_lines(name, index, values)

    def register_write_group_lines(self, names, index, columns) -> list[str]:
        return soft_write_group_lines(names, index, columns)

    def register_read_runs_lines(self, name: str, runs) -> list[str]:
        return [read_runs_line(name, runs)]

    def parse_read_runs(self, runs, outs: list[str]) -> np.ndarray:
        return cells_of_runs(outs[0], runs)

    def register_read_group_lines(self, names, runs) -> list[str]:
        return [read_runs_line(",".join(names), runs)]

    def parse_read_group(self, names, runs, outs: list[str]) -> dict[str, np.ndarray]:
        cells = cells_of_runs(outs[0], list(runs) * len(names))
        return dict(zip(names, np.split(cells, len(names))))

    def commands(self, lines: list[str]) -> list[str]:
        outs = []
        for start in range(0, len(lines), 512):      # bounded socket buffers both ways
            chunk = lines[start:start + 512]
            try:
                answers = self._client.request_many(chunk)
            except (OSError, SoftError) as exc:  # the switch died: its socket is gone
                raise SwitchCommandError(f"{self.name}: control connection lost ({exc})") from exc
            for line, (ok, out) in zip(chunk, answers):
                if not ok:
                    raise SwitchCommandError(f"{self.name}: {line!r}: {out}")
                outs.append(out)
        return outs

    def send_commands(self, lines: list[str]) -> Callable[[], list[str]]:
        if len(lines) > 4096:                   # the daemon buffers replies; keep it bounded
            return super().send_commands(lines)
        # the socket layer's own error too ("cannot connect": a switch killed, not yet
        # restarted): unconverted it escaped send_batches before the other switches' answers
        # were read, and a reroute failed without draining them
        try:
            self._client.send_many(lines)
        except (OSError, SoftError) as exc:     # the switch died: its socket is gone
            raise SwitchCommandError(f"{self.name}: control connection lost ({exc})") from exc

        def collect() -> list[str]:
            outs, failed = [], None
            try:
                answers = self._client.read_many(lines)
            except (OSError, SoftError) as exc:  # the switch died: its socket is gone
                raise SwitchCommandError(f"{self.name}: control connection lost ({exc})") from exc
            for line, (ok, out) in zip(lines, answers):
                if not ok:
                    failed = failed or SwitchCommandError(f"{self.name}: {line!r}: {out}")
                outs.append(out)
            if failed:
                raise failed
            return outs
        return collect

    def register_reset_lines(self, names) -> list[str]:
        return [f"register_reset {','.join(names)}"]

    def table_delete_lines(self, table: str, handles) -> list[str]:
        return [f"table_delete {table} {','.join(map(str, handles))}"] if handles else []

    def hold_lines(self, ms: float) -> list[str]:
        return [f"ports_hold {ms:g}"]

    def release_lines(self) -> list[str]:
        return ["ports_release"]

    def pids(self) -> list[int]:
        pid = self._client.peer_pid()       # per connection: a restarted switch is a new one
        return [pid] if pid else []

    def close(self) -> None:
        close = getattr(self._client, "close", None)
        if close:
            close()
