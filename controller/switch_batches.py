"""Batches to many switches at once: each switch's batch sent before any answer is read.

Why a module of its own: a switch client (switch_client.py) runs one switch's batch; what
the controller does to a network (a reroute's rounds, controller/reroute/bulk.py; the
forwarding install; the carry's reads) is one batch per switch, and a round costs the
slowest switch's time only if every batch is on its way before the first answer is read
(`SwitchClient.send_commands`). These helpers send, collect and read that way, and read
every switch's answers before raising the first error (a stale answer left in a socket
would be taken for the next command's).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Callable, TypeVar

import numpy as np

from agglab.controller.switch_client import SwitchClient, SwitchCommandError

T = TypeVar("T")

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


def run_batches(clients: dict[str, SwitchClient], batches: dict[str, list[str]],
                each: Callable[[str, list[str]], None] | None = None,
                sent: Callable[[], None] | None = None) -> dict[str, list[str]]:
    """One batch per switch, all sent before any answer is read (software switches work on
    them at once); outputs per switch, each also handed to `each(switch, outputs)` as soon as
    read. `sent()` runs once every batch is sent, before the first answer is read. Both
    overlap the caller's work with the switches'. Every answer is read before the first error
    is raised."""
    pending = send_batches(clients, batches)
    if sent is not None:
        sent()
    return collect_batches(pending, each and {sw: each for sw in pending})


def send_batches(clients: dict[str, SwitchClient], batches: dict[str, list[str]]) -> dict[str, Callable]:
    """run_batches' first half: every batch sent; collect_batches reads their answers (a
    caller may send a switch more batches meanwhile: they are answered in order). A switch
    that cannot be sent to (it died) does not stop the others: its collector raises the
    error, after collect_batches has read every other switch's answers."""
    pending = {}
    for sw, lines in batches.items():
        if not lines:
            continue
        try:
            pending[sw] = clients[sw].send_commands(lines)
        except SwitchCommandError as exc:
            pending[sw] = _raiser(exc)
    return pending


def _raiser(exc: Exception) -> Callable[[], list[str]]:
    def collect() -> list[str]:
        raise exc
    return collect


def collect_batches(pending: dict[str, Callable[[], list[str]]],
                    each: dict[str, Callable[[str, list[str]], None]] | None = None) -> dict[str, list[str]]:
    """Every switch's answers, in turn, each handed to each[switch](switch, outputs) as soon
    as read; the first error is raised once all were read."""
    outs, failed = {}, None
    for sw, collect in pending.items():
        try:
            outs[sw] = collect()
        except SwitchCommandError as exc:
            failed = failed or exc
            continue
        if each and sw in each and failed is None:
            each[sw](sw, outs[sw])
    if failed:
        raise failed
    return outs


def read_ranges(clients: dict[str, SwitchClient], name: str,
                ranges_of: dict[str, list[tuple[int, int]]]) -> dict[str, list[np.ndarray]]:
    """Register `name`'s cells of ranges_of[switch] [(start, count), ...], one array per
    range: from every switch at once in one batch each where batches pipeline (run_batches:
    a reroute's second round), else through register_read_ranges (on_each)."""
    ranges_of = {sw: ranges for sw, ranges in ranges_of.items() if ranges}
    if not all(clients[sw].pipelined_batches for sw in ranges_of):
        return on_each(clients, list(ranges_of), lambda sw: [
            np.asarray(cells) for cells in clients[sw].register_read_ranges(name, ranges_of[sw])])
    outs = run_batches(clients, {sw: clients[sw].register_read_runs_lines(name, ranges)
                                 for sw, ranges in ranges_of.items()})
    got = {}
    for sw, ranges in ranges_of.items():
        cells = clients[sw].parse_read_runs(ranges, outs[sw])
        got[sw] = np.split(cells, np.cumsum([count for _, count in ranges])[:-1])
    return got


def run_built(clients: dict[str, SwitchClient], switches, build: Callable[[str], list[str]]) -> dict[str, list[str]]:
    """run_batches, each switch's batch sent as soon as `build(switch)` made it: the switches
    already sent to work while the rest are built."""
    pending = {}
    for sw in switches:
        lines = build(sw)
        if lines:
            pending[sw] = clients[sw].send_commands(lines)
    return collect_batches(pending)
