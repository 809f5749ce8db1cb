"""BMv2 simple_switch over Thrift, three ways, one SwitchClient.

Why three: users of p4-utils program BMv2 through its `SimpleSwitchThriftAPI` (Python calls:
table_add(table, action, keys, params), register_read(name), mc_node_create(rid, ports) ...),
so where p4-utils imports, that is what agglab uses too. Without p4-utils, BMv2's own
runtime_CLI module (the code behind simple_switch_CLI) takes the same command lines through
`onecmd`; without BMv2's Python modules, one simple_switch_CLI process per batch.

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
import io
import os
import re
import shlex
import socket
import subprocess
import threading
import time

from controller.switch_client import SwitchClient, SwitchCommandError, find_bmv2_tool

RANGE_CELLS = 2048          # up to this many cells, register_read_ranges reads cells, not the register
PIPELINE_WINDOW = 256       # requests in flight per Thrift connection (answers must fit the socket buffer)
_ERROR = re.compile(r"Error|Invalid|exception|Traceback|\*\*\* Unknown")


class Bmv2Client(SwitchClient):
    """One simple_switch's control plane; `via` says which of the three ways is in use."""

    def __init__(self, name: str, thrift_port: int, timeout: float = 10.0, api=None, via: str | None = None):
        """Connect to simple_switch on `thrift_port`, or use an `api` object already connected
        (`via` "p4-utils" or "runtime_CLI", as returned by connect_api)."""
        self.name = name
        self.thrift_port = thrift_port
        self._lock = threading.Lock()          # the controller and the lab may share a client
        if api is None:
            _wait_for_port(name, thrift_port, timeout)
            api, via = connect_api(name, thrift_port)
        self.via = via or "runtime_CLI"
        self._api = api
        self._thrift = getattr(api, "client", None)     # the standard Thrift client under both APIs
        self._posted: list[tuple] = []                   # (method, args, recv) sent, answer unread

    # -- text commands -------------------------------------------------------------------
    def command(self, line: str) -> str:
        return self.commands([line])[0]

    def commands(self, lines: list[str]) -> list[str]:
        """Run the lines in order. Over Thrift, runs of register_write go pipelined and
        register_resets are posted: sent now, acknowledged before this client's next call."""
        outs: list[str] = []
        with self._lock:
            for kind, run in _runs(lines, bulk=self._thrift is not None):
                if kind == "register_reset":
                    self._post("bm_register_reset", [(0, line.split()[1]) for line in run])
                    outs += ["" for _ in run]
                    continue
                self._settle()
                outs += self._pipelined_writes(run) if kind == "register_write" else self._run_lines(run)
        return outs

    def _run_lines(self, lines: list[str]) -> list[str]:
        if self.via == "p4-utils":
            return [_check(self.name, line, _p4utils_command(self._api, line)) for line in lines]
        if self.via == "runtime_CLI":
            return [_check(self.name, line, _captured(self._api.onecmd, line)[1]) for line in lines]
        return _cli_session(self.name, self.thrift_port, lines)

    def _pipelined_writes(self, lines: list[str]) -> list[str]:
        cells = []
        for line in lines:
            words = line.split()
            if len(words) != 4:
                raise SwitchCommandError(f"{self.name}: {line!r}: register_write NAME INDEX VALUE")
            cells.append((words[1], int(words[2]), int(words[3])))
        self._thrift_pipeline("bm_register_write", [(0, n, i, v) for n, i, v in cells])
        return ["" for _ in lines]

    def _thrift_pipeline(self, method: str, calls: list[tuple]) -> list:
        """send_* for a window of calls, then recv_* for each: one round trip per window."""
        self._settle()                           # answers owed to earlier posts come first
        results = []
        for at in range(0, len(calls), PIPELINE_WINDOW):
            self._post(method, calls[at:at + PIPELINE_WINDOW])
            results += self._settle()
        return results

    def _post(self, method: str, calls: list[tuple]) -> None:
        """Send without waiting; the answers are read by _settle (at most a window outstanding,
        so that unread answers always fit the socket buffers and the switch never blocks)."""
        send, recv = getattr(self._thrift, "send_" + method), getattr(self._thrift, "recv_" + method)
        for args in calls:
            if len(self._posted) >= PIPELINE_WINDOW:
                self._settle()
            try:
                send(*args)
            except Exception as exc:
                raise SwitchCommandError(f"{self.name}: {method}: {exc!r}") from exc
            self._posted.append((method, args, recv))

    def _settle(self) -> list:
        """Read every outstanding answer, in order; raise for the first that failed."""
        posted, self._posted = self._posted, []
        results, failed = [], None
        for method, args, recv in posted:        # read every answer even after a failure
            try:
                results.append(recv())
            except Exception as exc:             # InvalidRegisterOperation and friends (generated types)
                failed = failed or (method, args, exc)
        if failed:
            method, args, exc = failed
            raise SwitchCommandError(f"{self.name}: {method}{args[1:]}: {exc!r}")
        return results

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
            self._settle()
            if index is None:
                return list(self._thrift_pipeline("bm_register_read_all", [(0, name)])[0])
            return int(self._thrift_pipeline("bm_register_read", [(0, name, index)])[0])

    def register_read_range(self, name: str, start: int, count: int) -> list[int]:
        """One Thrift call for the whole register beats `count` single reads on BMv2."""
        return self.register_read(name)[start:start + count]

    def register_read_ranges(self, name: str, ranges: list[tuple[int, int]]) -> list[list[int]]:
        """Few cells: their single reads, pipelined; many: the whole register in one call.
        (Python's Thrift decodes ~1.5 M cells/s, so a 131,072-cell register costs 50-100 ms,
        about as much as RANGE_CELLS pipelined single reads.)"""
        cells = sum(count for _, count in ranges)
        if self._thrift is None or cells > RANGE_CELLS:
            whole = self.register_read(name) if ranges else []
            return [whole[start:start + count] for start, count in ranges]
        with self._lock:
            values = iter(self._thrift_pipeline("bm_register_read", [(0, name, start + i) for start, count in ranges
                                                                     for i in range(count)]))
        return [[int(next(values)) for _ in range(count)] for _, count in ranges]

    def close(self) -> None:
        if self._thrift is not None:
            with self._lock, contextlib.suppress(SwitchCommandError):
                self._settle()
        transport = getattr(getattr(getattr(self._thrift, "_iprot", None), "trans", None), "close", None)
        if transport:
            with contextlib.suppress(Exception):
                transport()


def _runs(lines: list[str], bulk: bool):
    """Consecutive lines grouped as ("register_write" | "register_reset" | "other", lines)."""
    runs: list[tuple[str, list[str]]] = []
    for line in lines:
        verb = line.split(maxsplit=1)[0] if line.strip() else ""
        kind = verb if bulk and verb in ("register_write", "register_reset") and len(line.split()) > 1 else "other"
        if runs and runs[-1][0] == kind:
            runs[-1][1].append(line)
        else:
            runs.append((kind, [line]))
    return runs


def _wait_for_port(name: str, thrift_port: int, timeout: float) -> None:
    """simple_switch opens its Thrift port once the program is loaded."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            socket.create_connection(("127.0.0.1", thrift_port), timeout=1).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise SwitchCommandError(f"{name}: no Thrift server on port {thrift_port}")
            time.sleep(0.2)


_CAPTURE = threading.Lock()


def _captured(fn, *args):
    """Call fn with stdout/stderr captured (both APIs print their answers and their errors).
    The redirection is process-wide, so two clients in two threads (a reroute and the lab)
    take turns: interleaved, one could restore the other's buffer as sys.stdout for good."""
    buf = io.StringIO()
    with _CAPTURE, contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf):
        result = fn(*args)
    return result, buf.getvalue()


def _check(name: str, what: str, out: str) -> str:
    if _ERROR.search(out):
        raise SwitchCommandError(f"{name}: {what!r}: {out.strip()}")
    return out


# -- the three ways in ------------------------------------------------------------------------------
def add_bmv2_python_path() -> None:
    """BMv2 installs its Python runtime (runtime_CLI, bm_runtime, sswitch_runtime) under
    PREFIX/lib/python3*/site-packages, which Debian's python does not search; p4-utils imports
    those modules too."""
    import glob
    import sys

    binary = find_bmv2_tool("simple_switch")
    if not binary:
        return
    prefix = os.path.dirname(os.path.dirname(os.path.realpath(binary)))
    for path in sorted(glob.glob(f"{prefix}/lib/python3*/site-packages")) + \
            sorted(glob.glob(f"{prefix}/lib/python3*/dist-packages")):
        if path not in sys.path:
            sys.path.append(path)


def connect_api(name: str, thrift_port: int):
    """(api, via): p4-utils' SimpleSwitchThriftAPI, else BMv2's runtime_CLI, else (None, CLI program)."""
    add_bmv2_python_path()
    try:
        from p4utils.utils.sswitch_thrift_API import SimpleSwitchThriftAPI  # type: ignore
    except ImportError:
        SimpleSwitchThriftAPI = None
    try:
        if SimpleSwitchThriftAPI is not None:
            # p4-utils fixes the PRE to SimplePreLAG, which simple_switch serves; it reads the
            # program's JSON from the switch when json_path is not given
            api, _ = _captured(SimpleSwitchThriftAPI, thrift_port, "127.0.0.1")
            return api, "p4-utils"
        return _runtime_cli_api(thrift_port), "runtime_CLI"
    except ImportError:
        return None, "simple_switch_CLI"
    except SystemExit as exc:           # both exit on connection errors
        raise SwitchCommandError(f"{name}: Thrift connection to port {thrift_port} failed") from exc


def _runtime_cli_api(thrift_port: int):
    import runtime_CLI  # type: ignore  # BMv2's module, installed beside simple_switch
    from sswitch_CLI import SimpleSwitchAPI  # type: ignore

    services = runtime_CLI.RuntimeAPI.get_thrift_services(runtime_CLI.PreType.SimplePreLAG)
    services.extend(SimpleSwitchAPI.get_thrift_services())
    quiet = io.StringIO()          # both announce themselves on the stdout bound at import time
    std, mc, ss = runtime_CLI.utils.thrift_connect("127.0.0.1", thrift_port, services, out=quiet)
    runtime_CLI.load_json_str(runtime_CLI.utils.get_json_config(std, None, out=quiet))
    return SimpleSwitchAPI(runtime_CLI.PreType.SimplePreLAG, std, mc, ss)


# Commands whose words after the name group into lists for p4-utils: "=>" splits match keys
# from action parameters; a trailing number after the parameters is a priority.
_LIST_ARGS = {"table_add", "table_set_default", "table_modify", "mc_node_create", "mc_node_update"}


def _p4utils_command(api, line: str) -> str:
    """A simple_switch_CLI line as the p4-utils call a user would write, e.g.
    `table_add t a 1 2 => 3` -> api.table_add("t", "a", ["1", "2"], ["3"])."""
    words = shlex.split(line)
    if not words:
        return ""
    verb, args = words[0], words[1:]
    method = getattr(api, verb, None)
    if method is None:
        return f"*** Unknown syntax: {line}"
    if verb == "table_add":
        keys, _, params = " ".join(args[2:]).partition("=>")
        call = (args[0], args[1], keys.split(), params.split())
    elif verb in ("table_set_default",):
        call = (args[0], args[1], args[2:])
    elif verb == "table_modify":
        _, _, params = " ".join(args[3:]).partition("=>")
        call = (args[0], args[1], args[2], (params or " ".join(args[3:])).split())
    elif verb in ("mc_node_create", "mc_node_update"):
        ports, _, lags = " ".join(args[1:]).partition("|")
        call = (args[0], ports.split(), lags.split())
    else:
        call = tuple(args)
    result, out = _captured(method, *call)
    return out + _describe(verb, args, result)


def _describe(verb: str, args: list[str], result) -> str:
    """The answer simple_switch_CLI would print for what p4-utils returns silently."""
    if verb == "register_read" and result is not None:
        if len(args) > 1:
            return f"{args[0]}[{args[1]}]= {result}"
        return f"{args[0]}= " + ", ".join(str(v) for v in result)
    if verb == "table_num_entries" and result is not None:
        return str(result)
    return ""


def _cli_session(name: str, thrift_port: int, lines: list[str]) -> list[str]:
    """All lines through one simple_switch_CLI process; answers split at its prompts."""
    if not lines:
        return []
    cli = find_bmv2_tool("simple_switch_CLI")
    if not cli:
        raise SwitchCommandError("simple_switch_CLI not found (is BMv2 installed?)")
    proc = subprocess.run([cli, "--thrift-port", str(thrift_port)], input="\n".join(lines) + "\n",
                          capture_output=True, text=True, timeout=60 + len(lines) // 50)
    answers = [part.strip() for part in proc.stdout.split("RuntimeCmd: ")[1:1 + len(lines)]]
    if proc.returncode != 0 or len(answers) != len(lines):
        raise SwitchCommandError(f"{name}: simple_switch_CLI failed ({proc.returncode}): "
                                 f"{(proc.stdout + proc.stderr)[-2000:]}")
    return [_check(name, line, answer) for line, answer in zip(lines, answers)]
