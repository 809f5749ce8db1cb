"""Tensor fusion by dynamic programming over the cost model alpha + beta * s.

Why: every allreduce pays a start-up cost alpha (a round trip, the LEAD round of the
switch protocol, the ring's 2(n-1) steps); many small tensors sent one by one pay it many
times, while fusing them makes the first ones wait for the last. PACE decides which
neighbouring tensors to fuse with a dynamic program; here the objective is the time the
last group finishes when the groups go in release order, each starting when the channel
is free and its last member has been released (the makespan of the gradient
communication). Groups are contiguous in release order and at most `limit` bytes, so a
tensor larger than `limit` is a group of its own (PACE then cuts it into chunks).

Optimal substructure: a group's finish time max(prev_end, release_last) + alpha + beta*S
grows with prev_end, so the best partition of a prefix is the one that ends it earliest.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import combinations

from agglab.ground.schemes import scheme


@dataclass(frozen=True)
class CostModel:
    """Time of one allreduce of s bytes: alpha + beta * s (milliseconds)."""
    alpha_ms: float
    beta_ms_per_byte: float

    def __call__(self, nbytes: float) -> float:
        return self.alpha_ms + self.beta_ms_per_byte * nbytes

    @classmethod
    def fit(cls, nbytes, ms, beta_ms_per_byte: float | None = None) -> "CostModel":
        """alpha + beta*s through measured calls (bytes, ms) by least squares, alpha >= 0 and
        beta > 0. Calls of one size cannot separate the two: then beta is the given one (the
        link's) and alpha what the calls took beyond it, on average."""
        import numpy as np  # lazy: numpy, only fit() needs it

        x, y = np.asarray(nbytes, float), np.asarray(ms, float)
        if len(set(x.tolist())) < 2:
            if beta_ms_per_byte is None:
                raise ValueError("calls of one size: give the per-byte cost to separate alpha from it")
            return cls(max(float(np.mean(y - beta_ms_per_byte * x)), 0.0), beta_ms_per_byte)
        beta, alpha = np.polyfit(x, y, 1)
        return cls(max(float(alpha), 0.0), max(float(beta), 1e-15))

    @classmethod
    def for_network(cls, algorithm: str, workers: int, link_gbps: float, alpha_us: float) -> "CostModel":
        """Each scheme's factors are its row of ground/schemes.py. In-network aggregation moves every byte once up and once down
        a worker's link (full duplex, pipelined): s / rate, one start-up. A ring moves
        2(n-1)/n of the bytes and pays 2(n-1) start-ups; a colocated parameter server 2(n-1)/n
        of the bytes with two start-ups (push, pull)."""
        per_byte = 8.0 / (link_gbps * 1e9) * 1e3          # ms per byte at the link rate
        n = max(workers, 2)
        factor, startups = scheme(algorithm).cost(n)     # ground/schemes.py
        return cls(alpha_us * 1e-3 * startups, per_byte * factor)


def _group_end(prev_end: float, releases, sizes, i: int, j: int, cost: CostModel) -> float:
    """Finish time of the group of items i..j-1 sent after the channel frees at prev_end."""
    return max(prev_end, releases[j - 1]) + cost(sum(sizes[i:j]))


def fuse(sizes: list[float], releases: list[float], cost: CostModel, limit: float) -> list[tuple[int, int]]:
    """Optimal contiguous groups [(start, stop), ...] of items given in release order."""
    n = len(sizes)
    best = [0.0] + [float("inf")] * n      # best[j]: earliest finish of items 0..j-1
    cut = [0] * (n + 1)
    for j in range(1, n + 1):
        for i in range(j - 1, -1, -1):
            if j - i > 1 and sum(sizes[i:j]) > limit:
                break
            end = _group_end(best[i], releases, sizes, i, j, cost)
            if end < best[j]:
                best[j], cut[j] = end, i
    groups, j = [], n
    while j > 0:
        groups.append((cut[j], j))
        j = cut[j]
    return groups[::-1]


def makespan(groups: list[tuple[int, int]], sizes, releases, cost: CostModel) -> float:
    end = 0.0
    for i, j in groups:
        end = _group_end(end, releases, sizes, i, j, cost)
    return end


def all_partitions(n: int):
    """Every partition of 0..n-1 into contiguous groups (2^(n-1) of them): for brute force."""
    for k in range(n):
        for cuts in combinations(range(1, n), k):
            bounds = (0, *cuts, n)
            yield list(zip(bounds, bounds[1:]))
