"""Seeded block-sparse gradients for the sparse (OmniReduce-style) allreduce.

Why a generator of its own: the sparse pipeline's speed depends on *which*
blocks are non-zero on which worker, not only on how many, so experiments
and tests need the three patterns of the OmniReduce microbenchmark, each
reproducible from (rank, seed) alone: the checker in another namespace
recomputes every worker's input instead of shipping arrays around.

* ``random``   each rank draws its own non-zero blocks (rng seeded by seed and rank);
* ``overlap``  every rank has the same non-zero blocks (rng seeded by seed only);
  the values still differ per rank;
* ``disjoint`` one shared random permutation of the blocks (seeded by seed) is dealt
  out in consecutive runs of ``k`` blocks: rank r gets positions r*k .. r*k+k-1.
  Ranks' blocks do not intersect while ``density * workers <= 1``.  Beyond that the
  deal wraps around the permutation (positions modulo the block count), so blocks
  are shared as evenly as possible: every block belongs to at most
  ceil(density * workers) ranks.  The generator cannot warn, since it does not
  know the worker count.

``zero_workers`` (Z): ranks 0..Z-1 have no non-zero block at all (a worker with
nothing to contribute must still take part in every round); the others follow the
pattern as if those ranks did not exist, so Z changes nothing else.

``density`` is the fraction of non-zero blocks of ``block_size`` values:
k = round(density * blocks) (so a tiny array at density 0.01 may have none).
Values of a non-zero block follow agglab.hosts.workload (int32 in [-2^20, 2^20),
float32 normal scaled by 1 + rank); a drawn block is guaranteed to hold a
non-zero value, so "non-zero block" means exactly what the agent detects.
"""

from __future__ import annotations

import numpy as np

from agglab.ground import wire
from agglab.hosts.workload import DTYPES

PATTERNS = ("random", "overlap", "disjoint")


def _check(elements: int, dtype: str, density: float, pattern: str, block_size: int) -> None:
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {DTYPES}, got {dtype!r}")
    if elements < 0:
        raise ValueError(f"elements must be >= 0, got {elements}")
    if not 0.0 <= density <= 1.0:
        raise ValueError(f"density must be in [0, 1], got {density}")
    if pattern not in PATTERNS:
        raise ValueError(f"pattern must be one of {PATTERNS}, got {pattern!r}")
    if block_size < wire.K or block_size % wire.K:
        raise ValueError(f"block_size must be a positive multiple of K={wire.K}, got {block_size}")


def nonzero_block_ids(rank: int, elements: int, density: float, pattern: str = "random",
                      block_size: int = wire.K, seed: int = 0) -> np.ndarray:
    """Sorted indices (in units of block_size) of rank's non-zero blocks."""
    _check(elements, "int32", density, pattern, block_size)
    blocks = -(-elements // block_size)
    k = int(round(density * blocks))
    if k == 0:
        return np.zeros(0, dtype=np.int64)
    if pattern == "random":
        ids = np.random.default_rng([seed, rank, 0x5B]).choice(blocks, size=k, replace=False)
    elif pattern == "overlap":
        ids = np.random.default_rng([seed, 0x5B]).choice(blocks, size=k, replace=False)
    else:
        perm = np.random.default_rng([seed, 0xD5]).permutation(blocks)
        ids = np.unique(perm[(rank * k + np.arange(k)) % blocks])
    return np.sort(ids.astype(np.int64))


def sparse_gradient(rank: int, elements: int, dtype: str = "int32", density: float = 0.1,
                    pattern: str = "random", block_size: int = wire.K, seed: int = 0,
                    zero_workers: int = 0) -> np.ndarray:
    """One worker's block-sparse gradient (see the module docstring for the patterns)."""
    _check(elements, dtype, density, pattern, block_size)
    if zero_workers < 0:
        raise ValueError(f"zero_workers must be >= 0, got {zero_workers}")
    out = np.zeros(elements, dtype=np.dtype(dtype))
    if rank < zero_workers:
        return out
    ids = nonzero_block_ids(rank, elements, density, pattern, block_size, seed)
    if ids.size == 0:
        return out
    idx = (ids[:, None] * block_size + np.arange(block_size)).reshape(-1)
    idx = idx[idx < elements]
    rng = np.random.default_rng([seed, rank, 0x7A])
    if dtype == "int32":
        vals = rng.integers(-(1 << 20), 1 << 20, size=idx.size, dtype=np.int32)
    else:
        vals = (rng.standard_normal(idx.size) * (1.0 + rank)).astype(np.float32)
    out[idx] = vals
    firsts = ids * block_size                    # a drawn block must really be non-zero
    dead = [b for b in firsts if not np.any(out[b:b + block_size])]
    out[np.asarray(dead, dtype=np.int64)] = 1
    return out


def expected_sparse_sum(workers: int, elements: int, dtype: str = "int32", density: float = 0.1,
                        pattern: str = "random", block_size: int = wire.K,
                        seed: int = 0, zero_workers: int = 0) -> np.ndarray:
    """The exact reference: int32 with wrap-around, float32 inputs summed in float64."""
    acc = np.zeros(elements, dtype=np.int32 if dtype == "int32" else np.float64)
    for rank in range(workers):
        acc += sparse_gradient(rank, elements, dtype, density, pattern, block_size, seed, zero_workers)
    return acc
