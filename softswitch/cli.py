"""The simple_switch_CLI command subset of docs/design/, for the software switch.

Why the same language: controller, conformance vectors and people at a shell
program both targets with the same lines.  Answers follow BMv2's wording where
a caller parses them ("Entry has been added with handle N", "R[i]= V",
"R= v0, v1, ...", "node was created with handle N"); counter_read answers
"C[i]= BmCounterValue(packets=P, bytes=B)" like p4-utils' Thrift API.
Refusals raise CommandError whose text starts like BMv2's ("Invalid table
operation (DUPLICATE_ENTRY)", "Error: Invalid table name (x)", ...).
"""

from __future__ import annotations

import base64
import binascii
import ipaddress

import numpy as np

from agglab.softswitch.multicast import McError
from agglab.softswitch.registers import StateError
from agglab.softswitch.tables import Table, TableError


CELL_TYPES = ("u1", "u2", "u4", "u8", "i1", "i2", "i4", "i8")   # register_*_runs cell types


class CommandError(Exception):
    """A command the switch refused; the message says why."""


def parse_value(text: str, width: int, what: str) -> int:
    """Decimal, 0x hex, a.b.c.d (32-bit fields) or aa:bb:cc:dd:ee:ff (48-bit fields)."""
    try:
        if width == 32 and "." in text:
            value = int(ipaddress.IPv4Address(text))
        elif width == 48 and ":" in text:
            parts = text.split(":")
            if len(parts) != 6:
                raise ValueError
            value = int("".join(f"{int(p, 16):02x}" for p in parts), 16)
        else:
            value = int(text, 0)
    except ValueError:
        raise CommandError(f"Error while parsing {what} - invalid value '{text}'") from None
    if not 0 <= value < (1 << width):
        raise CommandError(f"Error while parsing {what} - '{text}' does not fit in {width} bits")
    return value


def _int(text: str, what: str) -> int:
    try:
        return int(text, 0)
    except ValueError:
        raise CommandError(f"Error: Bad format for {what}: '{text}'") from None


class Cli:
    def __init__(self, pipeline):
        self.p = pipeline

    def execute(self, line: str) -> str:
        words = line.split()
        if not words:
            return ""
        handler = getattr(self, "do_" + words[0], None)
        if handler is None:
            raise CommandError(f"*** Unknown syntax: {line.strip()}")
        try:
            return handler(words[1:])
        except TableError as exc:
            raise CommandError(f"Invalid table operation ({exc})") from None
        except McError as exc:
            raise CommandError(f"Invalid PRE operation ({exc})") from None
        except StateError as exc:
            raise CommandError(f"Invalid {words[0].split('_')[0]} operation ({exc})") from None

    # ---- helpers -----------------------------------------------------------------
    def _res(self, kind: str, name: str, where: dict):
        if name not in where:
            raise CommandError(f"Error: Invalid {kind} name ({name})")
        return where[name]

    @staticmethod
    def _nargs(args: list[str], n: int, at_least: bool = False) -> None:
        if len(args) < n if at_least else len(args) != n:
            raise CommandError("Error: Insufficient number of args" if len(args) < n else
                               f"Error: Wrong number of args, expected {n} but got {len(args)}")

    def _params(self, table: Table, action: str, texts: list[str]) -> tuple[int, ...]:
        spec = table.actions.get(action)
        if spec is None:
            raise CommandError(f"Error: Table {table.name} has no action {action}")
        if len(texts) != len(spec):
            raise CommandError(f"Invalid runtime data: action {action} needs {len(spec)} "
                               f"parameters ({', '.join(p for p, _ in spec)}), got {len(texts)}")
        return tuple(parse_value(t, w, f"{action}.{p}") for t, (p, w) in zip(texts, spec))

    def _key(self, table: Table, texts: list[str]) -> tuple:
        if len(texts) != len(table.keys):
            raise CommandError(f"Error: Table {table.name} needs {len(table.keys)} key fields")
        key = []
        for text, spec in zip(texts, table.keys):
            if spec.kind == "lpm":
                value, sep, plen = text.partition("/")
                if not sep:
                    raise CommandError(f"Invalid match key: LPM key '{text}' needs a /length")
                key.append((parse_value(value, spec.width, spec.field), _int(plen, "prefix length")))
            else:
                key.append(parse_value(text, spec.width, spec.field))
        return tuple(key)

    # ---- tables -------------------------------------------------------------------
    def do_table_add(self, args):
        self._nargs(args, 3, at_least=True)
        table = self._res("table", args[0], self.p.tables)
        action = args[1]
        rest = args[2:]
        split = rest.index("=>") if "=>" in rest else len(rest)
        params = self._params(table, action, rest[split + 1:])
        handle = table.add(self._key(table, rest[:split]), action, params)
        return f"Entry has been added with handle {handle}"

    def do_table_set_default(self, args):
        self._nargs(args, 2, at_least=True)
        table = self._res("table", args[0], self.p.tables)
        table.set_default(args[1], self._params(table, args[1], args[2:]))
        return f"Setting default action of {table.name}\naction: {args[1]}"

    def do_table_modify(self, args):
        self._nargs(args, 3, at_least=True)
        table = self._res("table", args[0], self.p.tables)
        handle = _int(args[2], "entry handle")
        texts = args[4:] if len(args) > 3 and args[3] == "=>" else args[3:]
        table.modify(handle, args[1], self._params(table, args[1], texts))
        kind = "lpm" if any(k.kind == "lpm" for k in table.keys) else "exact"
        return f"Modifying entry {handle} for {kind} match table {table.name}"

    def do_table_delete(self, args):
        """`table_delete T H`, or (an extension) `table_delete T H1,H2,...`: several entries in
        one command (a reroute's freeze deletes a dozen on every switch), all or none."""
        self._nargs(args, 2)
        table = self._res("table", args[0], self.p.tables)
        handles = [_int(h, "entry handle") for h in args[1].split(",")]
        if len(handles) > 1:
            if len(set(handles)) < len(handles):
                raise CommandError("Error: table_delete: an entry handle named twice")
            for handle in handles:
                table.lookup_handle(handle)                  # every one valid before any goes
        for handle in handles:
            table.delete(handle)
        return "\n".join(f"Deleting entry {handle} from {table.name}" for handle in handles)

    def do_table_clear(self, args):
        self._nargs(args, 1)
        self._res("table", args[0], self.p.tables).clear()
        return ""

    def do_table_num_entries(self, args):
        self._nargs(args, 1)
        return str(len(self._res("table", args[0], self.p.tables)))

    def do_table_dump(self, args):
        self._nargs(args, 1)
        table = self._res("table", args[0], self.p.tables)
        lines = [f"{h}: {key} => {action}{params}" for h, key, action, params in table.entries()]
        lines.append(f"default: {table.default[0]}{table.default[1]}")
        return "\n".join(lines)

    # ---- registers and counters ---------------------------------------------------
    def do_register_read(self, args):
        self._nargs(args, 1, at_least=True)
        reg = self._res("register", args[0], self.p.register_arrays)
        if len(args) == 1:
            return f"{reg.name}= " + ", ".join(map(str, reg.data.tolist()))
        self._nargs(args, 2)
        index = _int(args[1], "index")
        return f"{reg.name}[{index}]= {reg.read(index)}"

    def do_register_write(self, args):
        self._nargs(args, 3)
        reg = self._res("register", args[0], self.p.register_arrays)
        reg.write(_int(args[1], "index"), _int(args[2], "value"))
        return ""

    # Extensions (not in simple_switch_CLI): ranges, so a controller can snapshot and preload
    # a slot region in one command. Controller code falls back to per-index commands on BMv2.
    def do_register_read_range(self, args):
        self._nargs(args, 3)
        reg = self._res("register", args[0], self.p.register_arrays)
        start, count = _int(args[1], "start"), _int(args[2], "count")
        if start < 0 or count < 0 or start + count > len(reg.data):
            raise StateError(f"range {start}+{count} outside register {reg.name} of size {len(reg.data)}")
        return f"{reg.name}[{start}:{start + count}]= " + ", ".join(map(str, reg.data[start:start + count].tolist()))

    def do_register_write_range(self, args):
        self._nargs(args, 2, at_least=True)
        reg = self._res("register", args[0], self.p.register_arrays)
        start = _int(args[1], "start")
        values = [_int(text, "value") for text in args[2:]]
        if 0 <= start and start + len(values) <= reg.size and all(v >= 0 for v in values):
            mask = (1 << reg.width) - 1          # one slice assignment (the reroute's preload)
            reg.data[start:start + len(values)] = [v & mask for v in values]
            return ""
        for offset, value in enumerate(values):  # as single writes: the first bad index fails
            reg.write(start + offset, value)
        return ""

    # Binary bulk forms (extensions, software switch only): one command per register for a
    # reroute's reads and preloads, however many cells. RUNS is "start+count,start+count,..."
    # (cell ranges, in order); CELLS is "T:BASE64", the cells of the runs in order as
    # little-endian numpy type T (u1 u2 u4 u8 i1 i2 i4 i8). A read answers in the register's
    # own type (u4 for bit<32>); a write keeps each value's low W bits, as register_write does,
    # and writes nothing if a run is outside the register or the value count is not the runs'.
    # register_read_runs R1,R2,... RUNS (an extension of the extension): the runs' cells of
    # each register in turn, in the widest of their types (a reroute reads a dozen registers of
    # every switch at the same cells: one command, one answer)
    def do_register_read_runs(self, args):
        self._nargs(args, 2)
        regs = [self._res("register", name, self.p.register_arrays) for name in args[0].split(",")]
        runs = [self._runs(reg, args[1]) for reg in regs]
        starts, counts = runs[0][0].tolist(), runs[0][1].tolist()
        cells = [reg.data[s:s + c] for reg in regs for s, c in zip(starts, counts)]
        dtype = max((c.dtype for c in cells), key=lambda t: t.itemsize).newbyteorder("<")
        return f"{dtype.kind}{dtype.itemsize}:" + base64.b64encode(
            np.concatenate(cells).astype(dtype).tobytes()).decode("ascii")

    def do_register_write_runs(self, args):
        self._nargs(args, 3)
        reg = self._res("register", args[0], self.p.register_arrays)
        starts, counts = self._runs(reg, args[1])
        values = self._cells(reg, args[2], int(counts.sum()), "register_write_runs")
        if len(starts) == 1:
            reg.data[starts[0]:starts[0] + counts[0]] = values
        else:                                    # one scatter: cell k of run j is starts[j] + k
            reg.data[np.repeat(starts - (np.cumsum(counts) - counts), counts) + np.arange(counts.sum())] = values
        return ""

    # register_write_cells R[,R2...] I:BASE64 T:BASE64: the cells named by index (I: u4 or u8,
    # strictly increasing, so each once) of one or more registers (T:BASE64 holds each one's
    # values in turn), for scattered cells: a reroute's carried slot versions, whose runs would
    # be one per cell, and whose registers are written at the same cells
    def do_register_write_cells(self, args):
        self._nargs(args, 3)
        regs = [self._res("register", name, self.p.register_arrays) for name in args[0].split(",")]
        code, colon, text = args[1].partition(":")
        if not colon or code not in ("u4", "u8"):
            raise CommandError("Error: register_write_cells: indices must be I:BASE64 with I u4 or u8")
        index = self._binary(text, np.dtype("<" + code), "register_write_cells", "indices").astype(np.int64)
        for reg in regs:
            if index.size and (index[0] < 0 or index[-1] >= reg.size):
                bad = int(index[0] if index[0] < 0 else index[-1])
                raise StateError(f"index {bad} outside register {reg.name} of size {reg.size}")
        if index.size > 1 and not bool((index[1:] > index[:-1]).all()):
            raise CommandError("Error: register_write_cells: indices must be strictly increasing")
        wide = self._wide(args[2], len(regs) * index.size, "register_write_cells")
        for k, reg in enumerate(regs):
            reg.data[index] = self._low_bits(reg, wide[k * index.size:(k + 1) * index.size])
        return ""

    def _cells(self, reg, arg: str, count: int, command: str) -> np.ndarray:
        """T:BASE64 as `count` values in `reg`'s type, each value's low W bits kept."""
        return self._low_bits(reg, self._wide(arg, count, command))

    def _wide(self, arg: str, count: int, command: str) -> np.ndarray:
        """T:BASE64 as `count` values, as uint64 (a negative one two's complement)."""
        code, colon, text = arg.partition(":")
        if not colon or code not in CELL_TYPES:
            raise CommandError(f"Error: {command}: cells must be T:BASE64 with T one of {' '.join(CELL_TYPES)}")
        dtype = np.dtype("<" + code)
        values = self._binary(text, dtype, command, "cells")
        if values.size != count:
            raise CommandError(f"Error: {command}: {values.size} values for {count} cells")
        return values.astype(np.int64).view(np.uint64) if dtype.kind == "i" else values.astype(np.uint64)

    @staticmethod
    def _low_bits(reg, wide: np.ndarray) -> np.ndarray:
        return (wide & np.uint64((1 << reg.width) - 1)).astype(reg.data.dtype)

    @staticmethod
    def _binary(text: str, dtype: np.dtype, command: str, what: str) -> np.ndarray:
        try:
            raw = base64.b64decode(text, validate=True)
        except (binascii.Error, ValueError):
            raise CommandError(f"Error: {command}: {what} are not base64") from None
        if len(raw) % dtype.itemsize:
            raise CommandError(f"Error: {command}: {len(raw)} bytes is not a whole number of {dtype.str[1:]}")
        return np.frombuffer(raw, dtype=dtype)

    @staticmethod
    def _runs(reg, text: str) -> tuple[np.ndarray, np.ndarray]:
        """RUNS as (starts, counts) arrays, checked against the register."""
        parts = text.split(",")
        try:
            pairs = np.array([p.split("+") for p in parts], dtype=np.int64)
        except (ValueError, OverflowError):
            pairs = None
        if pairs is None or pairs.ndim != 2 or pairs.shape[1] != 2:
            bad = next((p for p in parts if len(p.split("+")) != 2), text)
            raise CommandError(f"Error: Bad format for runs: '{bad}' (start+count)")
        starts, counts = pairs[:, 0], pairs[:, 1]
        wrong = np.flatnonzero((starts < 0) | (counts < 1) | (starts + counts > reg.size))
        if wrong.size:
            start, count = int(starts[wrong[0]]), int(counts[wrong[0]])
            raise StateError(f"range {start}+{count} outside register {reg.name} of size {reg.size}")
        return starts, counts

    def do_register_reset(self, args):
        """`register_reset R`, or (an extension) `register_reset R1,R2,...`: several registers
        in one command (a reroute resets 17 on every switch of the new trees)."""
        self._nargs(args, 1)
        for reg in [self._res("register", name, self.p.register_arrays) for name in args[0].split(",")]:
            reg.reset()
        return ""

    # ---- meters (policer.py) ----------------------------------------------------------
    def do_meter_set_rates(self, args):
        """meter_set_rates NAME INDEX cir:cbs pir:pbs (rates per microsecond), as BMv2's CLI."""
        self._nargs(args, 4)
        meter = self._res("meter", args[0], self.p.meters)
        index = _int(args[1], "meter index")
        try:
            (cir, cbs), (pir, pbs) = ((float(r), int(b)) for r, b in (a.split(":") for a in args[2:]))
            meter.set_rates(index, cir, cbs, pir, pbs)
        except (ValueError, IndexError) as exc:
            raise CommandError(f"Invalid meter operation ({exc})") from None
        return ""

    def do_meter_get_rates(self, args):
        self._nargs(args, 2)
        meter = self._res("meter", args[0], self.p.meters)
        index = _int(args[1], "meter index")
        rates = meter.get_rates(index)
        if rates is None:
            return f"{args[0]}[{index}]: not configured"
        return "\n".join(f"{i}: info rate = {r}, burst size = {b}" for i, (r, b) in enumerate(rates))

    def do_counter_read(self, args):
        self._nargs(args, 2)
        counter = self._res("counter", args[0], self.p.counter_arrays)
        index = _int(args[1], "index")
        packets, nbytes = counter.read(index)
        return f"{counter.name}[{index}]= BmCounterValue(packets={packets}, bytes={nbytes})"

    def do_counter_reset(self, args):
        self._nargs(args, 1)
        self._res("counter", args[0], self.p.counter_arrays).reset()
        return ""

    def do_reset_state(self, args):
        self._nargs(args, 0)
        self.p.reset_state()
        return ""

    # ---- multicast ------------------------------------------------------------------
    def do_mc_mgrp_create(self, args):
        self._nargs(args, 1)
        mgrp = self.p.mc.mgrp_create(_int(args[0], "multicast group id"))
        return f"Creating multicast group {mgrp}"

    def do_mc_mgrp_destroy(self, args):
        self._nargs(args, 1)
        mgrp = _int(args[0], "multicast group id")
        self.p.mc.mgrp_destroy(mgrp)
        return f"Destroying multicast group {mgrp}"

    def _ports(self, texts: list[str]) -> list[int]:
        ports = [_int(t, "port number") for t in texts if t != "|"]
        if any(not 0 <= p < 512 for p in ports):
            raise CommandError(f"Error: port numbers must be 0..511, got {ports}")
        return ports

    @staticmethod
    def _port_map(ports: list[int]) -> str:
        return "".join("1" if p in ports else "0" for p in range(max(ports, default=-1), -1, -1))

    def do_mc_node_create(self, args):
        self._nargs(args, 1, at_least=True)
        rid, ports = _int(args[0], "rid"), self._ports(args[1:])
        handle = self.p.mc.node_create(rid, ports)
        return (f"Creating node with rid {rid} , port map {self._port_map(ports)} and lag map \n"
                f"node was created with handle {handle}")

    def do_mc_node_update(self, args):
        self._nargs(args, 1, at_least=True)
        handle, ports = _int(args[0], "node handle"), self._ports(args[1:])
        self.p.mc.node_update(handle, ports)
        return f"Updating node {handle} with port map {self._port_map(ports)} and lag map "

    def do_mc_node_associate(self, args):
        self._nargs(args, 2)
        mgrp, handle = _int(args[0], "multicast group id"), _int(args[1], "node handle")
        self.p.mc.node_associate(mgrp, handle)
        return f"Associating node {handle} to multicast group {mgrp}"

    def do_mc_node_dissociate(self, args):
        self._nargs(args, 2)
        mgrp, handle = _int(args[0], "multicast group id"), _int(args[1], "node handle")
        self.p.mc.node_dissociate(mgrp, handle)
        return f"Dissociating node {handle} from multicast group {mgrp}"

    def do_mc_node_destroy(self, args):
        self._nargs(args, 1)
        handle = _int(args[0], "node handle")
        self.p.mc.node_destroy(handle)
        return f"Destroying node {handle}"
