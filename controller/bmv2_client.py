"""BMv2 simple_switch over Thrift, three ways (controller/bmv2_ways.py), one SwitchClient.

Why registers bypass all three: the reroute's snapshot and preload move whole registers.
Both APIs keep the standard Thrift client as `.client`, so a whole register is one
`bm_register_read_all` call and a batch of `register_write` lines is sent pipelined
(all requests, then all answers, in windows), instead of a round trip per cell.
`register_reset`s are posted: sent, and acknowledged at this client's next call, so a loop
that resets every switch of a tree (the reroute) has all switches clearing at once instead of
one after the other; the next call on a switch still sees its registers cleared (one Thrift
connection answers in order), and a failed reset raises there.
"""

from __future__ import annotations

import contextlib
import os
import socket
import sys
import threading

from typing import Callable

from agglab.controller.bmv2_thrift import FAST_METHODS, BatchTranslator, CellCodec, Request, describe_error
from agglab.controller.switch_client import SwitchClient, SwitchCommandError

RANGE_CELLS = 2048          # up to this many cells, register_read_ranges reads cells, not the register
# Requests in flight on a connection are bounded by the bytes of their unread answers, which
# must fit this end's socket receive buffer: else the switch blocks writing answers, stops
# reading requests, and both ends wait. A small answer (a write's, a handle's) is under
# ANSWER_BYTES; a whole-register read's is 8 bytes a cell.
ANSWER_BYTES = 64
PIPELINE_WINDOW = 256       # small answers in flight where the receive buffer is not known
RECEIVE_BUFFER = 8 << 20    # asked of the kernel for each connection (SO_RCVBUFFORCE as root)
from agglab.controller.bmv2_cli_session import CliSession
from agglab.controller.bmv2_ways import (THRIFT_IP, _captured, _check, _p4utils_command, _wait_for_port, connect_api,
                                  load_runtime_cli_program)


class Bmv2Client(SwitchClient):
    """One simple_switch's control plane; `via` says which of the three ways is in use."""

    def __init__(self, name: str, thrift_port: int, timeout: float = 10.0, api=None, via: str | None = None,
                 thrift_ip: str = THRIFT_IP, pid: int | None = None):
        """Connect to simple_switch on `thrift_ip:thrift_port`, or use an `api` object already
        connected (`via` "p4-utils" or "runtime_CLI", as returned by connect_api). `thrift_ip`
        is not 127.0.0.1 when the switch runs on another server (cluster mode)."""
        self.name = name
        self.thrift_port = thrift_port
        self.thrift_ip = thrift_ip
        self.pid = pid                         # simple_switch's process, when it runs here
        self._lock = threading.Lock()          # the controller and the lab may share a client
        connected_here = api is None
        if connected_here:
            _wait_for_port(name, thrift_port, timeout, thrift_ip)
            api, via = connect_api(name, thrift_port, thrift_ip)
        self.via = via or "runtime_CLI"
        self._cli = CliSession(name, thrift_port, thrift_ip) if self.via == "simple_switch_CLI" else None
        # Batches (a reroute's entries and groups) go out as pipelined Thrift requests, encoded
        # with runtime_CLI's parsers, through p4-utils too: its API is one blocking call a
        # line, and a reroute through it took 600-900 ms where runtime_CLI's took under 250.
        # Single typed calls (table_add, mc_group: the lab, the exercises) stay p4-utils' own.
        self._batch_tables = self.via == "runtime_CLI" or (connected_here and self.via == "p4-utils"
                                                            and load_runtime_cli_program(api))
        self._api = api
        self._thrift = getattr(api, "client", None)     # the standard Thrift client under both APIs
        self._mc = getattr(api, "mc_client", None)       # the PRE's (multicast) client
        self._posted: list[tuple] = []                   # (Request, line, recv): sent, answer unread
        self.pipelined_batches = self._thrift is not None
        self._sizes: dict[str, int] | None = None
        self._unflushed = None                           # the transport while corked (_corked)
        self._cells = _cell_codec(self._thrift)          # single register cells, encoded here
        self._in_flight = 0                              # bytes of the posted requests' answers
        self.answer_budget = min(filter(None, (_answer_budget(c) for c in (self._thrift, self._mc))),
                                 default=PIPELINE_WINDOW * ANSWER_BYTES)
        # Through simple_switch_CLI a window's fill is a register_write line per cell (the CLI has no
        # range write): tens of thousands of lines, minutes per job start; one register_reset each
        # is one call. Over Thrift the window's one bm_register_write_range is cheaper.
        self.cheap_register_reset = self._thrift is None

    def pids(self) -> list[int]:
        """simple_switch's threads (a reroute raises them: ground/priority.py). Every thread:
        its Thrift server and packet pipelines are threads of their own, and niceness is per
        thread."""
        if self.pid is None:
            return []
        try:
            return [self.pid, *(int(t) for t in os.listdir(f"/proc/{self.pid}/task") if int(t) != self.pid)]
        except OSError:                        # gone (a killed switch)
            return []

    # -- text commands -------------------------------------------------------------------
    def command(self, line: str) -> str:
        return self.commands([line])[0]

    def commands(self, lines: list[str]) -> list[str]:
        """Run the lines in order (see send_commands)."""
        return self.send_commands(lines)()

    def send_commands(self, lines: list[str]) -> Callable[[], list[str]]:
        """Send a batch now; the returned call reads its answers and gives the outputs.
        Over Thrift, every line controller/bmv2_thrift.py translates is sent as requests without
        waiting (registers always; tables and multicast too through runtime_CLI); a line it
        does not translate runs through the API in its place, after the answers before it.
        register_resets stay posted: acknowledged at this client's next call."""
        if self._cli is not None:                   # the whole batch down the CLI's pipe at once
            with self._lock:
                outs = self._run_lines(lines)
            return lambda: outs
        answers: list[Callable[[], str]] = []
        mine: list[tuple[Request, str]] = []
        with self._lock, self._corked():
            batch = BatchTranslator(lines, tables=self._batch_tables, range_cells=RANGE_CELLS,
                                    sizes=self._register_sizes()) if self._thrift is not None else None
            for line in lines:
                try:
                    translated = batch.translate(line) if batch else None
                except ValueError as exc:
                    self._settle()
                    raise SwitchCommandError(f"{self.name}: {line!r}: {exc}") from None
                if translated is None:
                    self._settle()
                    with self._uncorked():           # the API's own call flushes as it should
                        out = self._run_lines([line])[0]
                    answers.append(lambda out=out: out)
                    continue
                for req in translated.requests:
                    self._post(req, line)
                    mine.append((req, line))
                answers.append(translated.answer)

        def collect() -> list[str]:
            with self._lock:
                self._settle(keep_posted=True)
            failed = next(((req, line) for req, line in mine if req.error is not None), None)
            if failed:
                raise SwitchCommandError(f"{self.name}: {failed[1]!r}: {describe_error(failed[0].error)}")
            try:
                return [answer() for answer in answers]
            except ValueError as exc:
                raise SwitchCommandError(f"{self.name}: {exc}") from None
        return collect

    def _register_sizes(self) -> dict[str, int]:
        """Cells per register of the loaded program, where runtime_CLI parsed it."""
        if self._sizes is None:
            arrays = getattr(sys.modules.get("runtime_CLI"), "REGISTER_ARRAYS", {}) if self._batch_tables else {}
            self._sizes = {name: reg.size for name, reg in arrays.items() if reg.size}
        return self._sizes

    def _run_lines(self, lines: list[str]) -> list[str]:
        if self.via == "p4-utils":
            return [_check(self.name, line, _p4utils_command(self._api, line)) for line in lines]
        if self.via == "runtime_CLI":
            return [_check(self.name, line, _captured(self._api.onecmd, line)[1]) for line in lines]
        return [_check(self.name, line, answer) for line, answer in zip(lines, self._cli.run(lines))]

    @contextlib.contextmanager
    def _corked(self):
        """Requests posted meanwhile go out in one socket write (at the end, or when answers are
        read): the generated send_X flushes the buffered transport after every request, a
        system call each, which was most of a reroute batch's cost."""
        trans = getattr(getattr(self._thrift, "_oprot", None), "trans", None)
        if trans is None or "flush" in vars(trans):
            yield
            return
        trans.flush = lambda: None
        self._unflushed = trans
        try:
            yield
        finally:
            del trans.flush
            self._unflushed = None
            trans.flush()

    @contextlib.contextmanager
    def _uncorked(self):
        trans = self._unflushed
        if trans is None:
            yield
            return
        del trans.flush
        try:
            yield
        finally:
            trans.flush = lambda: None

    def _flush(self) -> None:
        """Send what a cork holds back (before reading answers that depend on it)."""
        if self._unflushed is not None:
            type(self._unflushed).flush(self._unflushed)

    def _requests(self, requests: list[Request], what: str) -> list:
        """Send `requests`, read every answer (and those owed before them); their results."""
        for req in requests:
            self._post(req, what)
        self._settle()
        return [req.result for req in requests]

    def _post(self, req: Request, line: str) -> None:
        """Send without waiting; the answers are read by _settle (at most a window outstanding,
        so that unread answers always fit the socket buffers and the switch never blocks)."""
        client = self._thrift if req.service == "standard" else self._mc
        if client is None:
            raise SwitchCommandError(f"{self.name}: {line!r}: no Thrift client for the PRE")
        cost = self._answer_cost(req)
        if self._posted and self._in_flight + cost > self.answer_budget:
            self._settle(keep_posted=True)
            if self._posted and self._in_flight + cost > self.answer_budget:
                self._settle()
        self._in_flight += cost
        if self._cells is not None and req.service == "standard" and req.method in FAST_METHODS:
            codec, trans, read, errors = self._cells
            try:
                trans.write(codec.encode(req.method, req.args))
                trans.flush()                  # as send_X does (a no-op while corked)
            except Exception as exc:
                raise SwitchCommandError(f"{self.name}: {line!r}: {exc!r}") from exc
            self._posted.append((req, line, codec.receiver(read, req.method, errors), cost))
            return
        try:
            getattr(client, "send_" + req.method)(*req.args)
        except Exception as exc:
            raise SwitchCommandError(f"{self.name}: {line!r}: {exc!r}") from exc
        self._posted.append((req, line, getattr(client, "recv_" + req.method), cost))

    def _answer_cost(self, req: Request) -> int:
        """The most bytes `req`'s answer can take (a whole register: 8 a cell)."""
        if req.method == "bm_register_read_all":
            return ANSWER_BYTES + 8 * self._register_sizes().get(req.args[1], 1 << 17)
        return ANSWER_BYTES

    def _settle(self, keep_posted: bool = False) -> None:
        """Read the outstanding answers in order, each into its Request (`keep_posted`: the
        posted requests after the last other one stay unread). Every answer is read, then
        the first failure of one this call read raises, unless `keep_posted` (the caller
        checks its own requests: a failed posted reset raises at the next plain settle)."""
        self._flush()
        upto = len(self._posted)
        if keep_posted:
            while upto and self._posted[upto - 1][0].posted:
                upto -= 1
        read, self._posted = self._posted[:upto], self._posted[upto:]
        failed = None
        for req, line, recv, cost in read:
            self._in_flight -= cost
            try:
                req.result = recv()
            except Exception as exc:             # InvalidRegisterOperation and friends (generated types)
                req.error = exc
                if failed is None and (not keep_posted or req.posted):
                    failed = (req, line)
        if failed:
            raise SwitchCommandError(f"{self.name}: {failed[1]!r}: {describe_error(failed[0].error)}")

    # -- typed helpers: p4-utils' API as its users call it -------------------------------------
    def table_add(self, table: str, action: str, keys: list, params: list) -> int:
        if self.via != "p4-utils":
            return super().table_add(table, action, keys, params)
        handle, out = self._call("table_add", table, action, [str(k) for k in keys], [str(p) for p in params])
        if handle is None:
            raise SwitchCommandError(f"{self.name}: table_add {table} {action}: {out.strip()}")
        return int(handle)

    def mc_group(self, group: int, ports: list[int], rid: int = 0) -> int:
        if self.via != "p4-utils":
            return super().mc_group(group, ports, rid)
        self._call("mc_mgrp_create", group)
        handle, out = self._call("mc_node_create", rid, sorted(ports))
        if handle is None:
            raise SwitchCommandError(f"{self.name}: mc_node_create: {out.strip()}")
        self._call("mc_node_associate", group, handle)
        return int(handle)

    def counter_read(self, name: str, index: int) -> int:
        if self.via != "p4-utils":
            return super().counter_read(name, index)
        value, out = self._call("counter_read", name, index)
        if value is None:
            raise SwitchCommandError(f"{self.name}: counter_read {name} {index}: {out.strip()}")
        return int(value[1])                       # (bytes, packets)

    def _call(self, method: str, *args):
        """One p4-utils API call; it prints its errors instead of raising, so read them."""
        with self._lock:
            self._settle()
            result, out = _captured(getattr(self._api, method), *args)
        _check(self.name, f"{method}{args}", out)
        return result, out

    # -- registers in bulk ------------------------------------------------------------------------
    def register_read(self, name: str, index: int | None = None) -> int | list[int]:
        if self._thrift is None:
            return super().register_read(name, index)
        with self._lock:
            if index is None:
                return list(self._requests([Request("standard", "bm_register_read_all", (0, name))],
                                           f"register_read {name}")[0])
            return int(self._requests([Request("standard", "bm_register_read", (0, name, index))],
                                      f"register_read {name} {index}")[0])

    def register_read_range(self, name: str, start: int, count: int) -> list[int]:
        return self.register_read_ranges(name, [(start, count)])[0]

    def register_read_ranges(self, name: str, ranges: list[tuple[int, int]]) -> list[list[int]]:
        """Few cells: their single reads, pipelined; many: the whole register in one call.
        (Python's Thrift decodes ~1.5 M cells/s, ~3 M with the accelerated protocol, so a
        131,072-cell register costs 40-100 ms, about as much as RANGE_CELLS pipelined single
        reads.)"""
        cells = sum(count for _, count in ranges)
        if self._thrift is None or cells > RANGE_CELLS:
            whole = self.register_read(name) if ranges else []
            return [whole[start:start + count] for start, count in ranges]
        with self._lock:
            values = iter(self._requests([Request("standard", "bm_register_read", (0, name, start + i))
                                          for start, count in ranges for i in range(count)],
                                         f"register_read_range {name}"))
        return [[int(next(values)) for _ in range(count)] for _, count in ranges]

    def register_write_range_lines(self, name: str, start: int, values) -> list[str]:
        """Over Thrift, one range line (bmv2_thrift: one call when the values are all equal, e.g.
        a window's reset; else pipelined single writes); else a line per cell."""
        if self._thrift is None:
            return super().register_write_range_lines(name, start, values)
        return [f"register_write_range {name} {start} " + " ".join(map(str, map(int, values)))]

    def register_fill_lines(self, name: str, start: int, count: int, value: int = 0) -> list[str]:
        """Over Thrift, one `register_fill` line (bmv2_thrift: one bm_register_write_range)."""
        if self._thrift is None:
            return super().register_fill_lines(name, start, count, value)
        return [f"register_fill {name} {start} {count} {int(value)}"]

    def close(self) -> None:
        if self._cli is not None:
            self._cli.close()
        if self._thrift is not None:
            with self._lock, contextlib.suppress(SwitchCommandError):
                self._settle()
        transport = getattr(getattr(getattr(self._thrift, "_iprot", None), "trans", None), "close", None)
        if transport:
            with contextlib.suppress(Exception):
                transport()


def _answer_budget(client) -> int | None:
    """Bytes of answers that may be unread on `client`'s connection: half of the receive
    buffer, raised first to RECEIVE_BUFFER (a reroute's round then goes out to every switch
    before any answer is read: with 256 requests in flight at most, each switch's batch of
    a few hundred stopped half-way to wait for its answers, one switch after the other).
    None where the client has no socket of its own here (a stand-in)."""
    trans = getattr(getattr(client, "_iprot", None), "trans", None)
    sock = getattr(getattr(trans, "_TBufferedTransport__trans", trans), "handle", None)
    if not isinstance(sock, socket.socket):
        return None
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, getattr(socket, "SO_RCVBUFFORCE", 33), RECEIVE_BUFFER)
    if sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF) < RECEIVE_BUFFER:     # not root: up to rmem_max
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RECEIVE_BUFFER)
    # the kernel reports twice what it grants for data (the rest is its bookkeeping)
    return max(PIPELINE_WINDOW * ANSWER_BYTES, sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF) // 4)


def _cell_codec(thrift):
    """(codec, transport, read, errors) for the standard client's single cell calls
    (bmv2_thrift.CellCodec), or None where the client is not the binary protocol over a
    buffered transport that this encodes for (then the generated calls are used)."""
    oprot, iprot = getattr(thrift, "_oprot", None), getattr(thrift, "_iprot", None)
    if oprot is None or iprot is None or type(getattr(oprot, "trans", None)).__name__ != "TBufferedTransport":
        return None
    if not any(cls.__name__.startswith("TBinaryProtocol") for cls in type(oprot).__mro__) \
            or not getattr(oprot, "strictWrite", True):
        return None
    try:
        from bm_runtime.standard.ttypes import InvalidRegisterOperation  # type: ignore  # lazy: BMv2's Python, on the path only where BMv2 is
        from thrift.Thrift import TApplicationException  # lazy: BMv2's Python, on the path only where BMv2 is
    except ImportError:
        return None
    codec = CellCodec(getattr(oprot, "serviceName", None), getattr(thrift, "_seqid", 0))
    return codec, oprot.trans, iprot.trans.readAll, (InvalidRegisterOperation, TApplicationException)


