"""Every worker's input, derived from the run description alone.

Why: the worker process builds its gradient from (spec, rank) and the checker
rebuilds the same arrays from the same spec, so no array crosses a namespace and
the rule for "block-sparse data or not" is written once (`RunSpec.sparse_data`).
"""

from __future__ import annotations

import numpy as np

from agglab.ground.runspec import RunSpec
from agglab.hosts.sparse_workload import sparse_gradient
from agglab.hosts.workload import make_gradient


def gradient_for(spec: RunSpec, rank: int, elements: int | None = None) -> np.ndarray:
    """Rank's input array (its `length_override` applied unless `elements` is given)."""
    n = spec.elements_of(rank) if elements is None else elements
    if rank == 0 and spec.ps_only:                 # ATP's PS on a host of its own: a server, no gradient
        return np.zeros(n, dtype=spec.dtype)
    if spec.sparse_data:
        return sparse_gradient(rank, n, spec.dtype, spec.density, spec.pattern, spec.blocks,
                               spec.seed, spec.zero_workers)
    return make_gradient(rank, n, spec.dtype, spec.seed)


def inputs_for(spec: RunSpec) -> list[np.ndarray]:
    """All ranks' inputs at the spec's common length (what the aggregate is the sum of)."""
    return [gradient_for(spec, r, spec.elements) for r in range(spec.workers)]


def exact_sum(inputs: list[np.ndarray]) -> np.ndarray:
    """The reference: int32 with two's-complement wrap-around, float32 summed in float64."""
    acc = np.zeros(len(inputs[0]), dtype=np.int32 if inputs[0].dtype == np.int32 else np.float64)
    for x in inputs:
        acc += x
    return acc
