"""simple_switch_CLI lines as BMv2 Thrift requests, so that a batch of them can be pipelined.

Why: through BMv2's runtime_CLI every line is one blocking round trip, and a reroute sends a
few hundred lines (entries deleted and added, multicast groups, register reads, resets and
preload writes) to each of ~20 switches. Turned into Thrift requests, a batch is sent first
and its answers read afterwards (one connection answers in order), so every switch of a
reroute works on its batch at once (controller/switch_batches.run_batches) and no switch waits
for the controller between two lines. The answers are given back as the text
simple_switch_CLI prints for them ("Entry has been added with handle 3", "agg_count[0:4]=
1, 2, 3, 4"), so callers parse one vocabulary on both targets.

Besides simple_switch_CLI's own commands, the software switch's two range commands are
understood (`register_read_range NAME START COUNT`, `register_write_range NAME START V...`),
and `register_fill NAME START COUNT VALUE` (Bmv2Client.register_fill_lines writes it; it is
never sent to simple_switch_CLI):
BMv2 has no range read, so a range is single reads, pipelined, or one whole-register read
shared by every range of that register in the batch when they add up to more than
`range_cells`; a range write of one repeated value is one `bm_register_write_range` (a
window-sized reset costs one call, not a cell per call, nor a 131,072-cell `register_reset`).

Match keys and action data are parsed by runtime_CLI's own functions from the program's JSON
(loaded when the client connected), so a line means here what it means to simple_switch_CLI.
"""

from __future__ import annotations

import struct as _struct
import sys
from dataclasses import dataclass, field
from typing import Callable

# verbs sent as requests; "tables" ones only where runtime_CLI's parsers are loaded (with
# p4-utils, tables and multicast go through its API, as its users' code does)
# whole-register read vs single reads: on a loaded switch a 131,072-cell read took 37-55 ms (and
# the controller decodes its 1 MB), 4,096 pipelined single reads 57-98 ms (14-24 us each), so
# they break even near 2,000-2,600 cells of 131,072: 1/64 of a register (docs/measurements.md,
# 2026-12-06 third and fourth sessions; it was 1/200 from a ~25 us single read guessed against
# ~0.15 us a cell, which read a reroute's few held slot versions whole)
WHOLE_READ_RATIO = 64

REGISTER_VERBS = ("register_write", "register_write_range", "register_fill", "register_read",
                  "register_read_range", "register_reset")
TABLE_VERBS = ("table_add", "table_delete", "mc_mgrp_create", "mc_mgrp_destroy", "mc_node_create",
               "mc_node_associate", "mc_node_dissociate", "mc_node_destroy")


@dataclass
class Request:
    """One Thrift call: `service` "standard" (tables, registers) or "mc" (the PRE)."""
    service: str
    method: str
    args: tuple
    posted: bool = False          # its answer may be read at the connection's next call
    result: object = None
    error: Exception | None = None


@dataclass
class Translated:
    """A line's requests and how to print their results as simple_switch_CLI would."""
    requests: list[Request]
    answer: Callable[[], str] = field(default=lambda: "")


class BatchTranslator:
    """Translates the lines of one batch (shared whole-register reads need the batch)."""

    def __init__(self, lines: list[str], tables: bool, range_cells: int, sizes: dict[str, int] | None = None):
        """`sizes`: register -> cells, where the program is known: ranges of a register are read
        whole when their cells are more than 1/WHOLE_READ_RATIO of it (a single read costs
        the switch ~25 us, a cell of a whole read well under 1 us), else when they add up to
        more than `range_cells`."""
        self.tables = tables
        self.range_cells = range_cells
        self.sizes = sizes or {}
        self.whole: dict[str, Request] = {}          # register -> its one read_all of this batch
        self.cells: dict[str, int] = {}
        for line in lines:
            words = line.split()
            if len(words) == 4 and words[0] == "register_read_range":
                self.cells[words[1]] = self.cells.get(words[1], 0) + _int(words[3])

    def _read_whole(self, name: str) -> bool:
        cells = self.cells.get(name, 0)
        if name in self.sizes:
            return cells * WHOLE_READ_RATIO > self.sizes[name]
        return cells > self.range_cells

    def translate(self, line: str) -> Translated | None:
        """The requests for `line`, or None: not sent as requests (run it another way).
        Raises ValueError for a line of a known verb that cannot be right."""
        words = line.split()
        if not words:
            return None
        verb, args = words[0], words[1:]
        if verb in REGISTER_VERBS:
            return getattr(self, "_" + verb)(args)
        if self.tables and verb in TABLE_VERBS:
            return getattr(self, "_" + verb)(args)
        return None

    # -- registers -----------------------------------------------------------------------------
    def _register_write(self, args):
        name, index, value = _exactly(args, 3, "register_write NAME INDEX VALUE")
        return Translated([Request("standard", "bm_register_write", (0, name, _int(index), _int(value)))])

    def _register_write_range(self, args):
        if len(args) < 3:
            raise ValueError("register_write_range NAME START VALUE...")
        name, start, values = args[0], _int(args[1]), [_int(v) for v in args[2:]]
        if len(set(values)) == 1:
            return Translated([Request("standard", "bm_register_write_range",
                                       (0, name, start, start + len(values), values[0]))])
        return Translated([Request("standard", "bm_register_write", (0, name, start + i, v))
                           for i, v in enumerate(values)])

    def _register_fill(self, args):
        name, start, count, value = _exactly(args, 4, "register_fill NAME START COUNT VALUE")
        start = _int(start)
        return Translated([Request("standard", "bm_register_write_range",
                                   (0, name, start, start + _int(count), _int(value)))])

    def _register_reset(self, args):
        (name,) = _exactly(args, 1, "register_reset NAME")
        return Translated([Request("standard", "bm_register_reset", (0, name), posted=True)])

    def _register_read(self, args):
        if len(args) == 2:
            req = Request("standard", "bm_register_read", (0, args[0], _int(args[1])))
            return Translated([req], lambda: f"{args[0]}[{args[1]}]= {req.result}")
        (name,) = _exactly(args, 1, "register_read NAME [INDEX]")
        req = Request("standard", "bm_register_read_all", (0, name))
        return Translated([req], lambda: f"{name}= " + ", ".join(map(str, req.result)))

    def _register_read_range(self, args):
        name, start, count = _exactly(args, 3, "register_read_range NAME START COUNT")
        start, count = _int(start), _int(count)
        label = f"{name}[{start}:{start + count}]= "
        if self._read_whole(name):
            first = name not in self.whole
            req = self.whole.setdefault(name, Request("standard", "bm_register_read_all", (0, name)))

            def sliced() -> str:
                cells = req.result[start:start + count]
                if len(cells) != count:
                    raise ValueError(f"register_read_range {name} {start} {count}: past the end "
                                     f"({len(req.result)} cells)")
                return label + ", ".join(map(str, cells))
            return Translated([req] if first else [], sliced)
        reqs = [Request("standard", "bm_register_read", (0, name, start + i)) for i in range(count)]
        return Translated(reqs, lambda: label + ", ".join(str(r.result) for r in reqs))

    # -- tables and multicast (runtime_CLI's parsers) -----------------------------------------
    def _table_add(self, args):
        import runtime_CLI  # type: ignore  # lazy: BMv2's module, loaded with the program by the client
        from bm_runtime.standard.ttypes import BmAddEntryOptions  # type: ignore  # lazy: BMv2's Python, on the path only where BMv2 is

        if len(args) < 3 or "=>" not in args:
            raise ValueError("table_add TABLE ACTION KEY... => PARAM... [PRIORITY]")
        table = _resource(runtime_CLI, "table", args[0], runtime_CLI.ResType.table)
        action = table.get_action(args[1])
        if action is None:
            raise ValueError(f"table {args[0]} has no action {args[1]}")
        arrow = args.index("=>")
        keys, params = args[2:arrow], args[arrow + 1:]
        priority = 0
        if table.match_type in (runtime_CLI.MatchType.TERNARY, runtime_CLI.MatchType.RANGE):
            priority = _int(params.pop()) if params else 0
        if len(keys) != table.num_key_fields() or len(params) != action.num_params():
            raise ValueError(f"table {table.name} needs {table.num_key_fields()} key fields and action "
                             f"{action.name} {action.num_params()} parameters")
        try:
            match_key = runtime_CLI.parse_match_key(table, keys)
            data = runtime_CLI.parse_runtime_data(action, params)
        except runtime_CLI.UIn_Error as exc:
            raise ValueError(str(exc)) from None
        req = Request("standard", "bm_mt_add_entry", (0, table.name, match_key, action.name, data,
                                                      BmAddEntryOptions(priority=priority)))
        return Translated([req], lambda: f"Entry has been added with handle {req.result}")

    def _table_delete(self, args):
        import runtime_CLI  # type: ignore  # lazy: BMv2's Python, on the path only where BMv2 is

        name, handle = _exactly(args, 2, "table_delete TABLE HANDLE")
        table = _resource(runtime_CLI, "table", name, runtime_CLI.ResType.table)
        return Translated([Request("standard", "bm_mt_delete_entry", (0, table.name, _int(handle)))])

    def _mc_mgrp_create(self, args):
        (group,) = _exactly(args, 1, "mc_mgrp_create GROUP")
        return Translated([Request("mc", "bm_mc_mgrp_create", (0, _int(group)))],
                          lambda: f"Creating multicast group {group}")

    def _mc_mgrp_destroy(self, args):
        (group,) = _exactly(args, 1, "mc_mgrp_destroy GROUP")
        return Translated([Request("mc", "bm_mc_mgrp_destroy", (0, _int(group)))])

    def _mc_node_create(self, args):
        if not args:
            raise ValueError("mc_node_create RID PORT... [| LAG...]")
        ports, _, lags = " ".join(args[1:]).partition("|")
        req = Request("mc", "bm_mc_node_create", (0, _int(args[0]), port_map(ports.split()), port_map(lags.split())))
        return Translated([req], lambda: f"node was created with handle {req.result}")

    def _mc_node_associate(self, args):
        group, node = _exactly(args, 2, "mc_node_associate GROUP NODE")
        return Translated([Request("mc", "bm_mc_node_associate", (0, _int(group), _int(node)))])

    def _mc_node_dissociate(self, args):
        group, node = _exactly(args, 2, "mc_node_dissociate GROUP NODE")
        return Translated([Request("mc", "bm_mc_node_dissociate", (0, _int(group), _int(node)))])

    def _mc_node_destroy(self, args):
        (node,) = _exactly(args, 1, "mc_node_destroy NODE")
        return Translated([Request("mc", "bm_mc_node_destroy", (0, _int(node)))])


def describe_error(exc: Exception) -> str:
    """A Thrift operation error as runtime_CLI prints it: InvalidTableOperation(code=17) ->
    "InvalidTableOperation DUPLICATE_ENTRY" (the code's name from the generated enum)."""
    code = getattr(exc, "code", None)
    kind = type(exc).__name__
    if code is None or not kind.startswith("Invalid") or not kind.endswith("Operation"):
        return repr(exc)

    enum_name = kind[len("Invalid"):] + "ErrorCode"          # TableOperationErrorCode
    module = sys.modules.get(type(exc).__module__)
    names = getattr(getattr(module, enum_name, None), "_VALUES_TO_NAMES", {})
    return f"{kind} {names.get(code, code)}"


def port_map(ports: list[str]) -> str:
    """The PRE's port bitmap string (port 0 rightmost), as runtime_CLI builds it."""
    numbers = sorted({_int(p) for p in ports})
    if any(p < 0 for p in numbers):
        raise ValueError(f"bad port in {ports}")
    bits = ["0"] * (numbers[-1] + 1 if numbers else 0)
    for p in numbers:
        bits[p] = "1"
    return "".join(reversed(bits))


def _resource(runtime_cli, kind: str, name: str, res_type):
    try:
        return runtime_cli.SUFFIX_LOOKUP_MAP[res_type, name]
    except KeyError:
        raise ValueError(f"no {kind} {name!r} in the program") from None


def _exactly(args: list[str], n: int, usage: str) -> list[str]:
    if len(args) != n:
        raise ValueError(usage)
    return args


def _int(word: str) -> int:
    try:
        return int(word)
    except ValueError:
        raise ValueError(f"not a number: {word!r}") from None


# -- single register cells, encoded here ---------------------------------------------------------
# A reroute moves thousands of single cells (BMv2 has no range read, and a range write takes
# one value): through the generated client each costs ~5 us of Python to send and read
# unloaded, and 20 us and more when the switches hold both cores, which made the controller
# the reroute's bottleneck. These two calls' messages are fixed in shape, so they are built
# with one struct.pack and their answers read with a few fixed-size reads.
_I32, _I64, _STRING, _STRUCT, _STOP = 8, 10, 11, 12, 0
_CALL, _REPLY, _EXCEPTION = 1, 2, 3
_VERSION_1 = 0x80010000
FAST_METHODS = ("bm_register_read", "bm_register_write")


class CellCodec:
    """bm_register_read / bm_register_write on one Thrift connection (binary protocol, strict,
    as the generated client sends them; `service`: the multiplexed service name or None)."""

    def __init__(self, service: str | None, seqid: int = 0):
        self.service = service
        self.seqid = seqid
        self._heads: dict[tuple[str, str], bytes] = {}

    def _head(self, method: str, register: str) -> bytes:
        key = (method, register)
        head = self._heads.get(key)
        if head is None:
            name = (f"{self.service}:{method}" if self.service else method).encode()
            reg = register.encode()
            head = (_struct.pack(">Ii", (_VERSION_1 | _CALL), len(name)) + name + _struct.pack(">i", self.seqid)
                    + _struct.pack(">bhi", _I32, 1, 0)                  # cxt_id 0
                    + _struct.pack(">bhi", _STRING, 2, len(reg)) + reg)
            self._heads[key] = head
        return head

    def encode(self, method: str, args: tuple) -> bytes:
        """The call's bytes for Request args (cxt_id, register, index[, value]); cxt_id must be 0."""
        if args[0] != 0:
            raise ValueError("CellCodec: context 0 only")
        if method == "bm_register_write":
            return self._head(method, args[1]) + _struct.pack(">bhibhqb", _I32, 3, args[2], _I64, 4, args[3], _STOP)
        return self._head(method, args[1]) + _struct.pack(">bhib", _I32, 3, args[2], _STOP)

    @staticmethod
    def receiver(read: Callable[[int], bytes], method: str, errors) -> Callable[[], object]:
        """The call that reads one answer to `method` with `read(n)` (the transport's readAll):
        its result (a read's value, None for a write), raising what the generated recv
        raises (`errors`: the InvalidRegisterOperation class, TApplicationException)."""
        def recv():
            version, size = _struct.unpack(">Ii", read(8))
            kind = version & 0xFF
            if version & 0xFFFF0000 != _VERSION_1:
                raise errors[1](errors[1].BAD_VERSION, f"bad Thrift answer version {version:#x}")
            rest = read(size + 5)                        # the name, seqid, the first field's type
            ftype = rest[-1]
            if kind == _EXCEPTION:
                raise _application_error(read, ftype, errors[1])
            if ftype == _STOP:
                if method == "bm_register_write":
                    return None
                raise errors[1](errors[1].MISSING_RESULT, f"{method} failed: unknown result")
            (fid,) = _struct.unpack(">h", read(2))
            if ftype == _I64 and fid == 0:
                value, stop = _struct.unpack(">qb", read(9))
                if stop != _STOP:
                    raise errors[1](errors[1].PROTOCOL_ERROR, f"{method}: unexpected field after the result")
                return value
            if ftype == _STRUCT and fid == 1:
                fields = _read_struct(read)
                _read_struct(read)                   # the rest of the result struct
                raise errors[0](code=fields.get(1))
            raise errors[1](errors[1].PROTOCOL_ERROR, f"{method}: unexpected field {fid} of type {ftype}")
        return recv


def _read_value(read, ftype: int):
    if ftype == _I32:
        return _struct.unpack(">i", read(4))[0]
    if ftype == _I64:
        return _struct.unpack(">q", read(8))[0]
    if ftype == _STRING:
        (size,) = _struct.unpack(">i", read(4))
        return read(size).decode(errors="replace")
    if ftype == _STRUCT:
        return _read_struct(read)
    if ftype in (2, 3):                                   # bool, byte
        return read(1)[0]
    if ftype == 6:                                        # i16
        return _struct.unpack(">h", read(2))[0]
    if ftype == 4:                                        # double
        return _struct.unpack(">d", read(8))[0]
    raise ValueError(f"Thrift field type {ftype} not expected in a register call's answer")


def _read_struct(read) -> dict:
    """A struct's fields, id -> value, up to its STOP."""
    fields = {}
    while True:
        ftype = read(1)[0]
        if ftype == _STOP:
            return fields
        (fid,) = _struct.unpack(">h", read(2))
        fields[fid] = _read_value(read, ftype)


def _application_error(read, ftype: int, cls):
    """A TApplicationException answer (message type EXCEPTION), its first field's type read."""
    fields = {}
    while ftype != _STOP:
        (fid,) = _struct.unpack(">h", read(2))
        fields[fid] = _read_value(read, ftype)
        ftype = read(1)[0]
    return cls(fields.get(2, 0), fields.get(1))
