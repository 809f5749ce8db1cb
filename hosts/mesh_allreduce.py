"""What the host baselines (hosts/ring.py, hosts/ps.py) share around their schedules.

Why a module of its own: ring and PS differ only in who sends what to whom and when; the
frame of an allreduce call is the same for both and lives here: the call's checks, the mesh
opened for the call (or the communicator's, kept open), threads that fail together (the
first error, naming its peer, unblocks every other thread at once), the progress counters
threads wait on, the TCP counters read around the call, and the cutting of an array into
segments and chunks.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

import numpy as np

from agglab.ground.links import rto_min_ms
from agglab.hosts.diagnostics import AllreduceTimeout
from agglab.hosts.tcp_mesh import BASE_PORT, Mesh, open_mesh
from agglab.hosts.tcp_peer import PeerError, hello_for


class Threads:
    """The threads of one allreduce: the first error (naming its peer) is kept, the mesh
    closed and the counters aborted so every other thread unblocks at once, and `join`
    re-raises that first error in the caller (later ones are consequences of the closing)."""

    def __init__(self, mesh: Mesh, counters: list["Progress"]):
        self.mesh, self.counters = mesh, counters
        self.errors: list[BaseException] = []
        self.threads: list[threading.Thread] = []
        self.lock = threading.Lock()

    def spawn(self, name: str, fn, *args) -> None:
        def body():
            try:
                fn(*args)
            except BaseException as exc:
                with self.lock:
                    self.errors.append(exc)
                self.mesh.close()
                for c in self.counters:
                    c.abort()
        t = threading.Thread(target=body, name=name, daemon=True)
        self.threads.append(t)
        t.start()

    def join(self) -> None:
        for t in self.threads:
            t.join()
        if self.errors:
            raise self.errors[0]


class Progress:
    """A counter threads bump and wait on (the ring's chunk dependencies, the PS's arrivals)."""

    def __init__(self, give_up: float, me: int):
        self.cond = threading.Condition()
        self.done = 0
        self.give_up, self.me = give_up, me
        self.aborted = False

    def bump(self) -> None:
        with self.cond:
            self.done += 1
            self.cond.notify_all()

    def abort(self) -> None:
        with self.cond:
            self.aborted = True
            self.cond.notify_all()

    def wait_for(self, count: int, what: str) -> None:
        """Block until done >= count; at most give_up seconds without a bump."""
        with self.cond:
            while self.done < count:
                seen = self.done
                if self.aborted:
                    raise PeerError(f"rank {self.me}: aborted while waiting for {what}")
                if not self.cond.wait(self.give_up) and self.done == seen and not self.aborted:
                    raise AllreduceTimeout(f"rank {self.me}: waited {self.give_up:g} s for {what} "
                                           f"({self.done}/{count} done)")


def tcp_counters() -> dict[str, int]:
    """This network namespace's TCP counters from /proc/net/snmp (per namespace in Mininet):
    OutSegs (segments sent, ACKs included) and RetransSegs (segments retransmitted)."""
    with open("/proc/net/snmp") as f:
        rows = [line.split() for line in f if line.startswith("Tcp:")]
    table = dict(zip(rows[0][1:], rows[1][1:]))
    return {"OutSegs": int(table["OutSegs"]), "RetransSegs": int(table["RetransSegs"])}


@dataclass
class BaselineStats:
    """The same keys the in-network agents report (hosts/diagnostics.AllreduceStats) where they
    mean the same thing: packets_sent = TCP segments this host sent (ACKs included),
    retransmissions = TCP segments it retransmitted, both from its namespace's counters."""
    packets_sent: int = 0
    retransmissions: int = 0
    seconds: float = 0.0
    setup_seconds: float = 0.0
    bytes_sent: int = 0               # payload bytes handed to TCP (frames and hellos excluded)
    messages_sent: int = 0


RTO_WAITS = 2.5          # a TCP baseline outwaits this many of its link's RTO floors


def tcp_give_up(give_up: float, link_mbps: float | None) -> float:
    """The no-progress limit of a TCP baseline on a `link_mbps` host link: `give_up`, but at
    least RTO_WAITS times the RTO floor the session sets on that link's route (ground/links.py
    `rto_min_ms`). Why: a segment lost past fast retransmit and the tail-loss probe (the last
    one of a message) is resent only at the RTO, 11.8 s at 0.525 Mb/s; with the default 10 s
    a healthy ring on BMv2 gave up 24 bytes short of its last message (2026-12-07)."""
    if not link_mbps:
        return give_up
    return max(give_up, RTO_WAITS * rto_min_ms(link_mbps) / 1000)


def allreduce_over_mesh(algorithm: str, body, array, *, rank: int, peers: list[str],
                        out_to: list[int], in_from: list[int], port: int = BASE_PORT,
                        give_up: float = 10.0, return_stats: bool = False, link_mbps: float | None = None,
                        mesh: Mesh | None = None):
    """Shared frame of the baselines: check the call, open the mesh (unless `mesh`, already
    open for this array's length and dtype, is given: then it stays open, and the time and
    segments counted are the allreduce's alone), run `body(arr, mesh)` (which returns the
    sum), close what it opened, count TCP segments around it."""
    arr = np.ascontiguousarray(array)
    hello = hello_for(algorithm, arr, rank, len(peers))
    if mesh is not None and mesh.hello != hello:
        raise ValueError(f"rank {rank}: the open connections were set up for {mesh.hello}, not for {hello}")
    before, t0 = tcp_counters(), time.monotonic()
    stats = BaselineStats()
    if len(peers) == 1:
        result = arr.copy()
    else:
        own = mesh is None
        if own:
            mesh = open_mesh(hello, peers, out_to, in_from, port=port, give_up=give_up, link_mbps=link_mbps)
            stats.setup_seconds = time.monotonic() - t0
        sent_before = (mesh.bytes_sent(), sum(p.sent for p in mesh.peers()))
        try:
            result = body(arr, mesh)
        finally:
            if own:
                mesh.close()
        stats.bytes_sent = mesh.bytes_sent() - sent_before[0]
        stats.messages_sent = sum(p.sent for p in mesh.peers()) - sent_before[1]
    after = tcp_counters()
    stats.seconds = time.monotonic() - t0
    stats.packets_sent = after["OutSegs"] - before["OutSegs"]
    stats.retransmissions = after["RetransSegs"] - before["RetransSegs"]
    return (result, stats) if return_stats else result


def chunk_bounds(lo: int, hi: int, chunk: int) -> list[tuple[int, int]]:
    """[lo, hi) cut into pieces of at most `chunk` elements; an empty range is one empty
    piece, so every segment is at least one message and the schedule never depends on data."""
    if hi <= lo:
        return [(lo, lo)]
    return [(a, min(a + chunk, hi)) for a in range(lo, hi, chunk)]


def segment_bounds(length: int, parts: int) -> list[tuple[int, int]]:
    """`length` elements split into `parts` contiguous segments whose sizes differ by at most 1."""
    edges = [length * i // parts for i in range(parts + 1)]
    return list(zip(edges[:-1], edges[1:]))
