"""Ring allreduce over TCP: reduce-scatter then all-gather, chunked and pipelined (as NCCL
and Horovod do), the host baseline `--algorithm ring`.

The array is cut into n segments (sizes differ by at most one element). In step t
(0 <= t < 2(n-1)) rank r sends segment (r - t) mod n to rank r+1 and receives segment
(r - t - 1) mod n from rank r-1: during the first n-1 steps it adds what it receives
(reduce-scatter; afterwards rank r holds the full sum of segment r+1), during the last
n-1 it overwrites (all-gather). What a rank sends in step t+1 is exactly what it
received in step t, so the schedule pipelines at chunk granularity: a sender thread
sends chunk c of step t+1 as soon as the receiving thread has finished chunk c of step
t, and every link carries data continuously. Each rank sends and receives 2(n-1)/n of
the array, the bandwidth-optimal amount for an allreduce without in-network help.

Exactness: int32 sums wrap as numpy int32 does. float32 segments are summed in float32
in a fixed order (segment s: x_s + x_{s+1} + ... around the ring), so the error against
the exact sum is at most gamma_{n-1} * sum |x_i| <= n * 2^-24 * sum |x_i| per element
(recursive summation, Higham, Accuracy and Stability, eq. 4.4); hosts/checker.py checks
that bound. Every rank returns the same bits (the all-gather copies).
"""

from __future__ import annotations

import numpy as np

from agglab.hosts.mesh_allreduce import (Progress, Threads, allreduce_over_mesh, chunk_bounds, segment_bounds,
                                         tcp_give_up)
from agglab.hosts.tcp_mesh import BASE_PORT, Mesh

CHUNK_BYTES = 64 * 1024        # one pipelined message: 45 full TCP segments at MSS 1448


def connections(rank: int, n: int) -> tuple[list[int], list[int]]:
    """(ranks this worker connects to, ranks that connect to it): its right and left neighbour."""
    return [(rank + 1) % n], [(rank - 1) % n]


def allreduce(array, *, rank: int, peers: list[str], port: int = BASE_PORT, give_up: float = 10.0,
              on_progress=None, link_mbps: float | None = None, chunk_bytes: int = CHUNK_BYTES,
              return_stats: bool = False, mesh: Mesh | None = None):
    """Sum `array` over the workers at `peers` (one IPv4 address per rank, in rank order),
    over `mesh` if given (tcp_mesh.open_mesh for this algorithm and array: kept open), else
    over connections opened and closed for this call."""
    n = len(peers)
    out_to, in_from = connections(rank, n)
    give_up = tcp_give_up(give_up, link_mbps)

    def body(arr: np.ndarray, mesh: Mesh) -> np.ndarray:
        return _Ring(arr, rank, n, mesh, give_up, on_progress, max(1, chunk_bytes // arr.itemsize)).run()

    return allreduce_over_mesh("ring", body, array, rank=rank, peers=peers, out_to=out_to, in_from=in_from,
                               port=port, give_up=give_up, return_stats=return_stats, link_mbps=link_mbps,
                               mesh=mesh)


def schedule(rank: int, n: int, length: int, chunk: int):
    """The ring's messages for one rank, in order: (sends, receives).

    sends[i] = (step, lo, hi, needs): send buf[lo:hi] once `needs` receives are done;
    receives[j] = (step, lo, hi, add): receive into buf[lo:hi], adding when `add`."""
    segs = segment_bounds(length, n)
    steps = 2 * (n - 1)
    receives, index = [], {}
    for t in range(steps):
        s = (rank - t - 1) % n
        for c, (lo, hi) in enumerate(chunk_bounds(*segs[s], chunk)):
            index[t, s, c] = len(receives)
            receives.append((t, lo, hi, t < n - 1))
    sends = []
    for t in range(steps):
        s = (rank - t) % n           # what arrived in step t-1 (for t > 0)
        for c, (lo, hi) in enumerate(chunk_bounds(*segs[s], chunk)):
            sends.append((t, lo, hi, 0 if t == 0 else index[t - 1, s, c] + 1))
    return sends, receives


class _Ring:
    def __init__(self, arr, rank, n, mesh: Mesh, give_up, on_progress, chunk):
        self.buf = arr.copy()
        self.rank, self.n, self.chunk = rank, n, chunk
        self.right, self.left = mesh.out[(rank + 1) % n], mesh.inc[(rank - 1) % n]
        self.sends, self.receives = schedule(rank, n, len(arr), chunk)
        self.received = Progress(give_up, rank)
        self.threads = Threads(mesh, [self.received])
        self.on_progress = on_progress

    def run(self) -> np.ndarray:
        self.threads.spawn(f"ring-send-{self.rank}", self._send_all)
        self.threads.spawn(f"ring-recv-{self.rank}", self._receive_all)
        self.threads.join()
        return self.buf

    def _send_all(self) -> None:
        for step, lo, hi, needs in self.sends:
            self.received.wait_for(needs, f"chunk [{lo}:{hi}] of step {step - 1} from {self.left.name}")
            self.right.send(self.buf[lo:hi])

    def _receive_all(self) -> None:
        scratch = np.empty(self.chunk, dtype=self.buf.dtype)
        total = len(self.receives)
        for j, (step, lo, hi, add) in enumerate(self.receives):
            what = f"{'reduce-scatter' if add else 'all-gather'} step {step} chunk [{lo}:{hi}]"
            if add:
                part = scratch[: hi - lo]
                self.left.recv_into(part, what)
                np.add(self.buf[lo:hi], part, out=self.buf[lo:hi])    # int32 wraps, as numpy's sum
            else:
                self.left.recv_into(self.buf[lo:hi], what)
            self.received.bump()
            if self.on_progress:
                self.on_progress(j + 1, total)
