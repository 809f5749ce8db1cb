"""Deterministic per-rank gradients, so the checker can recompute every worker's input
from (rank, seed) instead of shipping arrays between namespaces."""

from __future__ import annotations

import numpy as np

DTYPES = ("int32", "float32")


def make_gradient(rank: int, elements: int, dtype: str, seed: int = 0) -> np.ndarray:
    """Random data of one worker: int32 in [-2^20, 2^20), float32 ~ N(0, 1) scaled per rank."""
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {DTYPES}, got {dtype!r}")
    if elements < 1:
        raise ValueError(f"elements must be positive, got {elements}")
    rng = np.random.default_rng([seed, rank])
    if dtype == "int32":
        return rng.integers(-(1 << 20), 1 << 20, size=elements, dtype=np.int32)
    return (rng.standard_normal(elements) * (1.0 + rank)).astype(np.float32)


def expected_sum(workers: int, elements: int, dtype: str, seed: int = 0) -> np.ndarray:
    """The exact reference: int32 with wrap-around, float32 summed in float64."""
    acc = np.zeros(elements, dtype=np.int32 if dtype == "int32" else np.float64)
    for rank in range(workers):
        acc += make_gradient(rank, elements, dtype, seed)
    return acc
