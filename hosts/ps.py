"""Parameter server over TCP, the host baseline `--algorithm ps`: sharded (the default) or central.

Layout `sharded` (the default): colocated and sharded, as BytePS and Horovod's
parameter-server mode run it when every machine is also a server: the array is cut into
n shards (sizes differ by at most one element) and worker j also serves shard j. Each
worker pushes shard j of its array to server j, server j sums the n contributions and
sends the sum back to every worker. Per host that is (n-1)/n of the array pushed out and
(n-1)/n served back out, the same 2(n-1)/n the ring sends, but in one round trip
instead of 2(n-1) steps, over n(n-1) connections instead of n.

Layout `central` (`--ps-layout central`): one server, rank 0's host, owns the whole array (the
other shards are empty), as the classic PS deployments RAT and ATP compare against: every worker
pushes the whole array to it and it sends the whole sum back to each, so its host link carries
n-1 arrays each way. The same code: only the shard boundaries differ.

Pipelining: every shard travels in chunks; one thread per worker drives all its flows
(hosts/flow_loop.py: a selector writes to whichever connection has room and reads whichever
has data), so a flow slowed by its receiver's busy downlink never holds up the others on the
same uplink; a server sums chunk c as soon as every worker's chunk c arrived and queues the
sum to every worker at once. One thread, not one per flow: a 128-worker PS would otherwise
start 65,280 threads on one machine.

Exactness: int32 sums wrap as numpy int32 does. A server sums float32 contributions in
rank order 0..n-1 whatever order they arrived in, so the result is deterministic and
within gamma_{n-1} * sum |x_i| <= n * 2^-24 * sum |x_i| of the exact sum (the bound
hosts/checker.py applies); every worker receives the same bits.
"""

from __future__ import annotations

import numpy as np

from agglab.hosts.flow_loop import FlowLoop
from agglab.hosts.mesh_allreduce import allreduce_over_mesh, chunk_bounds, segment_bounds, tcp_give_up
from agglab.hosts.tcp_mesh import BASE_PORT, CONNECT_AT_ONCE, Mesh

CHUNK_BYTES = 64 * 1024


def threads_per_worker(n: int) -> int:
    """Threads one worker of an n-worker PS runs at its peak, during setup: the caller (which
    then drives every flow), the acceptor and CONNECT_AT_ONCE connectors."""
    return 2 + min(CONNECT_AT_ONCE, max(1, n - 1))


def connections(rank: int, n: int) -> tuple[list[int], list[int]]:
    """(ranks this worker connects to, ranks that connect to it): every other, both ways."""
    others = [(rank + i) % n for i in range(1, n)]
    return others, others


LAYOUTS = ("sharded", "central")


def shard_bounds(length: int, n: int, layout: str = "sharded") -> list[tuple[int, int]]:
    """Each rank's shard [lo, hi): n near-equal pieces, or (central) all of it at rank 0."""
    if layout == "central":
        return [(0, length)] + [(length, length)] * (n - 1)
    if layout != "sharded":
        raise ValueError(f"ps layout must be one of {', '.join(LAYOUTS)}, got {layout!r}")
    return segment_bounds(length, n)


def allreduce(array, *, rank: int, peers: list[str], port: int = BASE_PORT, give_up: float = 10.0,
              on_progress=None, link_mbps: float | None = None, chunk_bytes: int = CHUNK_BYTES,
              return_stats: bool = False, mesh: Mesh | None = None, layout: str = "sharded"):
    """Sum `array` over the workers at `peers` (one IPv4 address per rank, in rank order),
    over `mesh` if given (tcp_mesh.open_mesh for this algorithm and array: kept open), else
    over connections opened and closed for this call."""
    n = len(peers)
    out_to, in_from = connections(rank, n)
    give_up = tcp_give_up(give_up, link_mbps)

    def body(arr: np.ndarray, mesh: Mesh) -> np.ndarray:
        return _Ps(arr, rank, n, mesh, give_up, on_progress, max(1, chunk_bytes // arr.itemsize), layout).run()

    return allreduce_over_mesh("ps", body, array, rank=rank, peers=peers, out_to=out_to, in_from=in_from,
                               port=port, give_up=give_up, return_stats=return_stats,
                               link_mbps=link_mbps, mesh=mesh)


def _nothing() -> None:
    """A sum's chunk is in: nothing more to do (its bytes were counted as they came)."""


class _Ps:
    def __init__(self, arr, rank, n, mesh: Mesh, give_up, on_progress, chunk, layout: str = "sharded"):
        self.arr, self.rank, self.n, self.mesh = arr, rank, n, mesh
        self.others = [(rank + i) % n for i in range(1, n)]
        self.shards = shard_bounds(len(arr), n, layout)
        self.chunks = [chunk_bounds(lo, hi, chunk) for lo, hi in self.shards]
        lo, hi = self.shards[rank]
        self.staging = np.empty((n, hi - lo), dtype=arr.dtype)      # my shard, one row per worker
        self.staging[rank] = arr[lo:hi]
        self.result = np.empty_like(arr)
        self.arrived = [0] * len(self.chunks[rank])                 # workers' pushes in, per chunk
        self.reduced = 0                                             # chunks of my shard summed
        self.loop = FlowLoop(mesh, give_up, rank, self._read if on_progress else None)
        self.on_progress = on_progress
        # progress: the bytes this worker receives (its shard pushed by every other, every
        # other shard's sum), counted as they arrive (`_read`)
        self.done = 0
        self.total = (n - 1) * (hi - lo) * arr.itemsize + sum(b - a for j, (a, b) in enumerate(self.shards)
                                                             if j != rank) * arr.itemsize

    def run(self) -> np.ndarray:
        loop, out, inc = self.loop, self.mesh.out, self.mesh.inc
        for j in self.others:                       # worker side: push shard j, expect its sum
            for c, (lo, hi) in enumerate(self.chunks[j]):
                loop.send(out[j], self.arr[lo:hi])
                loop.expect(out[j], self.result[lo:hi], f"the sum of shard {j} chunk {c} [{lo}:{hi}]", _nothing)
        base = self.shards[self.rank][0]
        for i in self.others:                       # server side: every worker's chunks of my shard
            for c, (lo, hi) in enumerate(self.chunks[self.rank]):
                loop.expect(inc[i], self.staging[i, lo - base:hi - base],
                            f"shard {self.rank} chunk {c} [{lo}:{hi}] pushed by rank {i}", lambda c=c: self._arrived(c))
        loop.run()
        return self.result

    def _arrived(self, c: int) -> None:
        """One worker's chunk c is in; sum every chunk all workers have sent, in chunk order
        (each worker sends its chunks in order, so chunk c never completes before c-1)."""
        self.arrived[c] += 1
        base = self.shards[self.rank][0]
        while self.reduced < len(self.arrived) and self.arrived[self.reduced] == self.n - 1:
            lo, hi = self.chunks[self.rank][self.reduced]
            rows = self.staging[:, lo - base:hi - base]
            acc = self.result[lo:hi]
            acc[:] = rows[0]
            for k in range(1, self.n):          # rank order: deterministic float32 sums
                acc += rows[k]
            for i in self.others:
                self.loop.send(self.mesh.inc[i], acc)
            self.reduced += 1

    def _read(self, nbytes: int) -> None:
        """Progress by the bytes received, as they arrive.

        Why bytes, not chunks: a shard smaller than a chunk (every emulated gradient under 8 x
        64 KiB) is one message, and all of a worker's pushes and sums travel at once, so
        counting finished chunks moved in steps of 1/n, the first of them when the pushes were
        nearly all in: a failure "at 30% of the blocks" came after most of the PS's bytes had
        crossed (on both backends the PS with a failed uplink ran at 0.66-0.76x the wire time
        the failure's fraction gives, docs/measurements.md, 2026-12-06 fifth session). Bytes
        received advance with the wire, as a ring's steps and the in-network results do."""
        self.done += nbytes
        self.on_progress(self.done, self.total)
