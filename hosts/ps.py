"""Sharded parameter server over TCP, the host baseline `--algorithm ps`.

Layout (the default and only one): colocated and sharded, as BytePS and Horovod's
parameter-server mode run it when every machine is also a server: the array is cut into
n shards (sizes differ by at most one element) and worker j also serves shard j. Each
worker pushes shard j of its array to server j, server j sums the n contributions and
sends the sum back to every worker. Per host that is (n-1)/n of the array pushed out and
(n-1)/n served back out, the same 2(n-1)/n the ring sends, but in one round trip
instead of 2(n-1) steps, over n(n-1) connections instead of n.

Pipelining: every shard travels in chunks, one thread per flow (a push to a server, a
reply to a worker), so a flow slowed by its receiver's busy downlink never holds up the
others on the same uplink; a server sums chunk c as soon as every worker's chunk c arrived
and each reply thread returns it at once.

Exactness: int32 sums wrap as numpy int32 does. A server sums float32 contributions in
rank order 0..n-1 whatever order they arrived in, so the result is deterministic and
within gamma_{n-1} * sum |x_i| <= n * 2^-24 * sum |x_i| of the exact sum (the bound
hosts/checker.py applies); every worker receives the same bits.
"""

from __future__ import annotations

import threading

import numpy as np

from hosts.tcp_mesh import BASE_PORT, Mesh, Progress, Threads, allreduce_over_mesh, chunk_bounds, segment_bounds

CHUNK_BYTES = 64 * 1024


def threads_per_worker(n: int) -> int:
    """Threads one worker of an n-worker PS runs: four per peer (push, its results, the
    peer's pushes, the replies to it), the reducer, the caller."""
    return 4 * (n - 1) + 2


def allreduce(array, *, rank: int, peers: list[str], port: int = BASE_PORT, give_up: float = 10.0,
              on_progress=None, link_mbps: float | None = None, chunk_bytes: int = CHUNK_BYTES,
              return_stats: bool = False):
    """Sum `array` over the workers at `peers` (one IPv4 address per rank, in rank order)."""
    n = len(peers)
    others = [(rank + i) % n for i in range(1, n)]

    def body(arr: np.ndarray, mesh: Mesh) -> np.ndarray:
        return _Ps(arr, rank, n, mesh, give_up, on_progress, max(1, chunk_bytes // arr.itemsize)).run()

    return allreduce_over_mesh("ps", body, array, rank=rank, peers=peers, out_to=others, in_from=others,
                               port=port, give_up=give_up, return_stats=return_stats,
                               link_mbps=link_mbps)


class _Ps:
    def __init__(self, arr, rank, n, mesh: Mesh, give_up, on_progress, chunk):
        self.arr, self.rank, self.n, self.mesh = arr, rank, n, mesh
        self.others = [(rank + i) % n for i in range(1, n)]
        self.shards = segment_bounds(len(arr), n)
        self.chunks = [chunk_bounds(lo, hi, chunk) for lo, hi in self.shards]
        lo, hi = self.shards[rank]
        self.staging = np.empty((n, hi - lo), dtype=arr.dtype)      # my shard, one row per worker
        self.staging[rank] = arr[lo:hi]
        self.result = np.empty_like(arr)
        self.pushed = {i: Progress(give_up, rank) for i in self.others}   # chunks received from worker i
        self.reduced = Progress(give_up, rank)                              # chunks of my shard summed
        self.results = Progress(give_up, rank)                              # result chunks in place
        self.threads = Threads(mesh, [*self.pushed.values(), self.reduced])
        self.on_progress, self.progress_lock = on_progress, threading.Lock()
        self.total = sum(len(c) for c in self.chunks)

    def run(self) -> np.ndarray:
        spawn = self.threads.spawn
        for i in self.others:        # one thread per flow: a flow waits for its own receiver only
            spawn(f"ps-push-{self.rank}-{i}", self._push, i)
            spawn(f"ps-result-recv-{self.rank}-{i}", self._receive_results, i)
            spawn(f"ps-serve-recv-{self.rank}-{i}", self._receive_pushes, i)
            spawn(f"ps-reply-{self.rank}-{i}", self._reply, i)
        spawn(f"ps-reduce-{self.rank}", self._reduce)
        self.threads.join()
        return self.result

    # -- worker side ---------------------------------------------------------------
    def _push(self, j: int) -> None:
        for lo, hi in self.chunks[j]:
            self.mesh.out[j].send(self.arr[lo:hi])

    def _receive_results(self, j: int) -> None:
        for c, (lo, hi) in enumerate(self.chunks[j]):
            self.mesh.out[j].recv_into(self.result[lo:hi], f"the sum of shard {j} chunk {c} [{lo}:{hi}]")
            self._done()

    # -- server side ---------------------------------------------------------------
    def _receive_pushes(self, i: int) -> None:
        base = self.shards[self.rank][0]
        for c, (lo, hi) in enumerate(self.chunks[self.rank]):
            self.mesh.inc[i].recv_into(self.staging[i, lo - base:hi - base],
                                       f"shard {self.rank} chunk {c} [{lo}:{hi}] pushed by rank {i}")
            self.pushed[i].bump()

    def _reduce(self) -> None:
        base = self.shards[self.rank][0]
        for c, (lo, hi) in enumerate(self.chunks[self.rank]):
            for i in self.others:
                self.pushed[i].wait_for(c + 1, f"chunk {c} of shard {self.rank} from rank {i}")
            rows = self.staging[:, lo - base:hi - base]
            acc = self.result[lo:hi]
            acc[:] = rows[0]
            for k in range(1, self.n):          # rank order: deterministic float32 sums
                acc += rows[k]
            self.reduced.bump()
            self._done()

    def _reply(self, i: int) -> None:
        for c, (lo, hi) in enumerate(self.chunks[self.rank]):
            self.reduced.wait_for(c + 1, f"the sum of chunk {c} of shard {self.rank}")
            self.mesh.inc[i].send(self.result[lo:hi])

    def _done(self) -> None:
        self.results.bump()
        if self.on_progress:
            with self.progress_lock:
                self.on_progress(self.results.done, self.total)
