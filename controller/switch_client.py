"""One control interface, two data planes.

Both targets are programmed in the simple_switch_CLI command language, so the
conformance vectors, the controller and a human at a CLI use one vocabulary:
- SoftSwitchClient talks to the software switch's Unix control socket;
- Bmv2Client (controller/bmv2_client.py) talks Thrift to simple_switch, through
  p4-utils' SimpleSwitchThriftAPI when installed, else BMv2's own runtime_CLI module,
  else the simple_switch_CLI program.
Typed helpers (table_add, register_read, ...) are built once on top of command().
"""

from __future__ import annotations

import re
import shutil
from abc import ABC, abstractmethod
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, TypeVar

import numpy as np

T = TypeVar("T")


class SwitchCommandError(RuntimeError):
    """A control command was rejected by the switch."""


class SwitchClient(ABC):
    name: str = "?"
    # True when a commands() batch runs between two packets (no packet sees half of it) and
    # text table_add/mc_node_create lines answer with their handles: the software switch's
    # one event loop. A reroute then needs no drain and goes out as bulk batches
    # (controller/job.py); BMv2's pipeline threads do not give that.
    atomic_batches: bool = False
    # True when send_commands() really sends before it reads (software switch; BMv2 over
    # Thrift), so that a reroute's rounds reach every switch at once (controller/job.py)
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
        (run_batches); the default runs the batch at once."""
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

    def register_write(self, name: str, index: int, value: int) -> None:
        self.command(f"register_write {name} {index} {value}")

    def register_reset(self, name: str) -> None:
        self.command(f"register_reset {name}")

    def counter_read(self, name: str, index: int) -> int:
        """Packets counted at index."""
        out = self.command(f"counter_read {name} {index}")
        # software switch: "BmCounterValue(packets=P, bytes=B)"; BMv2: "C[i]= (B bytes, P packets)"
        match = re.search(r"packets=(\d+)", out) or re.search(r"(\d+) packets", out)
        if not match:
            raise SwitchCommandError(f"{self.name}: cannot parse counter_read output {out!r}")
        return int(match.group(1))

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

    def close(self) -> None:
        pass


def _cells(out: str, count: int) -> list[int]:
    """The values of a software switch's `register_read_range` answer (parsed in C)."""
    cells = np.fromstring(out.split("=", 1)[1], dtype=np.int64, sep=",")
    if cells.size != count:
        raise SwitchCommandError(f"register_read_range: {cells.size} values, {count} asked: {out[:80]!r}")
    return cells.tolist()


def _join(items) -> str:
    return " ".join(str(x) for x in items)


def table_add_line(table: str, action: str, keys: list, params: list) -> str:
    return f"table_add {table} {action} {_join(keys)} => {_join(params)}".rstrip()


def parse_handle(name: str, what: str, out: str) -> int:
    """The handle in a table_add or mc_node_create answer."""
    match = re.search(r"handle (\d+)", out)
    if not match:
        raise SwitchCommandError(f"{name}: {what}: {out.strip()}")
    return int(match.group(1))


_POOL: ThreadPoolExecutor | None = None


def on_each(clients: dict[str, SwitchClient], switches, fn: Callable[[str], T]) -> dict[str, T]:
    """fn(switch) for every switch: at once (threads) when every client's batches are atomic
    (software switches, each its own process and socket), else one after the other."""
    global _POOL
    switches = list(switches)
    if len(switches) < 2 or not all(clients[sw].atomic_batches for sw in switches):
        return {sw: fn(sw) for sw in switches}
    if _POOL is None:
        _POOL = ThreadPoolExecutor(max_workers=32, thread_name_prefix="switch-batch")
    futures = {sw: _POOL.submit(fn, sw) for sw in switches}
    return {sw: f.result() for sw, f in futures.items()}


def run_batches(clients: dict[str, SwitchClient], batches: dict[str, list[str]]) -> dict[str, list[str]]:
    """One batch per switch, all sent before any answer is read (software switches work on
    them at once); outputs per switch. Every answer is read before the first error is raised."""
    pending = {sw: clients[sw].send_commands(lines) for sw, lines in batches.items() if lines}
    outs, failed = {}, None
    for sw, collect in pending.items():
        try:
            outs[sw] = collect()
        except SwitchCommandError as exc:
            failed = failed or exc
    if failed:
        raise failed
    return outs


class SoftSwitchClient(SwitchClient):
    """The software switch's control socket (see softswitch/control.py)."""

    atomic_batches = True
    pipelined_batches = True
    cheap_register_reset = True

    def __init__(self, name: str, socket_path: str, timeout: float = 10.0):
        from softswitch.control import ControlClient, wait_ready

        self.name = name
        wait_ready(socket_path, timeout)
        self._client = ControlClient(socket_path)

    def command(self, line: str) -> str:
        from softswitch.control import SwitchCommandError as SoftError

        try:
            return self._client.command(line)
        except SoftError as exc:
            raise SwitchCommandError(f"{self.name}: {line!r}: {exc}") from exc

    def register_read_range(self, name: str, start: int, count: int) -> list[int]:
        return _cells(self.command(f"register_read_range {name} {start} {count}"), count)

    def register_write_range_lines(self, name: str, start: int, values) -> list[str]:
        return [f"register_write_range {name} {start} " + " ".join(map(str, map(int, values)))]

    def register_read_ranges(self, name: str, ranges: list[tuple[int, int]]) -> list[list[int]]:
        outs = self.commands([f"register_read_range {name} {start} {count}" for start, count in ranges])
        return [_cells(o, count) for o, (_start, count) in zip(outs, ranges)]

    def commands(self, lines: list[str]) -> list[str]:
        outs = []
        for start in range(0, len(lines), 512):      # bounded socket buffers both ways
            chunk = lines[start:start + 512]
            for line, (ok, out) in zip(chunk, self._client.request_many(chunk)):
                if not ok:
                    raise SwitchCommandError(f"{self.name}: {line!r}: {out}")
                outs.append(out)
        return outs

    def send_commands(self, lines: list[str]) -> Callable[[], list[str]]:
        if len(lines) > 4096:                   # the daemon buffers replies; keep it bounded
            return super().send_commands(lines)
        self._client.send_many(lines)

        def collect() -> list[str]:
            outs, failed = [], None
            for line, (ok, out) in zip(lines, self._client.read_many(lines)):
                if not ok:
                    failed = failed or SwitchCommandError(f"{self.name}: {line!r}: {out}")
                outs.append(out)
            if failed:
                raise failed
            return outs
        return collect

    def close(self) -> None:
        close = getattr(self._client, "close", None)
        if close:
            close()


def find_bmv2_tool(name: str) -> str | None:
    """simple_switch / simple_switch_CLI / p4c on PATH, else under /opt/*/bin."""
    found = shutil.which(name)
    if found:
        return found
    import glob

    hits = sorted(glob.glob(f"/opt/*/bin/{name}"))
    return hits[0] if hits else None
