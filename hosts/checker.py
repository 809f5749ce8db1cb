"""The checker: compare what every worker returned with numpy's sum of the same inputs.

It lives with the hosts because it rebuilds each worker's input from the run
description exactly as the worker did (hosts/gradients.py).
"""

from __future__ import annotations

import numpy as np

from agglab.ground import wire
from agglab.ground.runspec import RunSpec
from agglab.ground.schemes import HOST_BASELINES, SCHEMES
from agglab.hosts.gradients import exact_sum, inputs_for
from agglab.hosts.quantization import biased_exponents, error_bound


def float32_error_bound(inputs: list[np.ndarray]) -> np.ndarray:
    """Per-element bound for float32 results: the agreed exponent of each block is the
    max over workers, and agglab.hosts.quantization.error_bound(e, n) bounds that block."""
    n, length = len(inputs), len(inputs[0])
    blocks = -(-length // wire.K)
    padded = np.zeros((n, blocks * wire.K), dtype=np.float32)
    for i, x in enumerate(inputs):
        padded[i, :length] = x
    agreed = np.max([biased_exponents(p.reshape(blocks, wire.K)) for p in padded], axis=0)
    per_block = np.array([error_bound(None if b == 0 else int(b) - wire.EXP_BIAS, n) for b in agreed])
    return np.repeat(per_block, wire.K)[:length]


def summation_error_bound(inputs: list[np.ndarray]) -> np.ndarray:
    """Per-element bound for the host baselines (ring, ps): n float32 values added one at a
    time in float32, in any fixed order, are within gamma_{n-1} * sum |x_i| of the exact sum
    (Higham, Accuracy and Stability of Numerical Algorithms, eq. 4.4; gamma_m = m u / (1 - m u),
    u = 2^-24). n * u * sum |x_i| covers that and the float64 reference's own rounding for
    any n <= 1024 (gamma_{n-1} + (n-1) 2^-53 <= n u while n^2 u < 0.9)."""
    total = np.zeros(len(inputs[0]), dtype=np.float64)
    for x in inputs:
        total += np.abs(x.astype(np.float64))
    return len(inputs) * 2.0 ** -24 * total


# spec.algorithm -> its float32 error bound; the in-network pipelines quantize (float32_error_bound)
FLOAT32_BOUNDS = {name: summation_error_bound for name in HOST_BASELINES}


def _median_ms(values: list) -> float | None:
    """The median of the given seconds that are not None, in ms (None if there are none)."""
    vals = sorted(v for v in values if v is not None)
    if not vals:
        return None
    mid = len(vals) // 2
    return round((vals[mid] if len(vals) % 2 else (vals[mid - 1] + vals[mid]) / 2) * 1e3, 3)


def check(spec: RunSpec, reports: list[dict], switch_stats: dict) -> dict:
    """The run's result object: ok/exact, time, goodput, packets, errors by rank."""
    errors = [f"rank {r['rank']}: {r['error']}" for r in reports if not r.get("ok")]
    result = {
        "ok": not errors, "exact": False, "backend": spec.backend, "workers": spec.workers,
        "elements": spec.elements, "dtype": spec.dtype, "loss": spec.loss,
        "values_per_packet": wire.K,                 # the program variant (AGGLAB_K)
        "seconds": None, "goodput_mbps": None, "packets": None, "retransmissions": None,
        "max_abs_error": None, "error_bound": None, "switch": switch_stats,
    }
    if errors:
        result["errors"] = errors
        return result
    seconds = max(r["seconds"] for r in reports)
    inputs = inputs_for(spec)
    expected = exact_sum(inputs)
    worst, exact, bound = 0.0, True, 0.0
    if spec.dtype == "float32":
        bound_vec = FLOAT32_BOUNDS.get(spec.algorithm, float32_error_bound)(inputs)
        bound = float(bound_vec.max())
    for r in reports:
        got = r.pop("result")
        if got.shape != expected.shape:
            exact = False
            worst = float("inf")
            continue
        if spec.dtype == "int32":
            diff = np.abs(got.astype(np.int64) - expected.astype(np.int64))
            exact &= bool(np.array_equal(got, expected))
        else:
            diff = np.abs(got.astype(np.float64) - expected)
            exact &= bool(np.all(diff <= bound_vec))
        worst = max(worst, float(diff.max()))
    result.update(
        exact=exact, ok=exact, seconds=round(seconds, 4),
        goodput_mbps=round(spec.elements * 4 * 8 / seconds / 1e6, 2),
        packets=sum(r["packets_sent"] for r in reports),
        retransmissions=sum(r["retransmissions"] for r in reports),
        duplicates_ignored=sum(r.get("duplicates_ignored", 0) for r in reports),
        # the workers' own CPU during the allreduce (user + system, all ranks): with the
        # switches' share in `fidelity`, where an unfaithful run's time went
        worker_cpu_s=round(sum(r.get("cpu_user_s", 0) + r.get("cpu_sys_s", 0) for r in reports), 3),
        # what the ranks cost to start (imports, input, socket: CPU-s, all ranks) and to hold
        # (the largest rank's resident MB; the sum of their proportional shares)
        worker_start_cpu_s=round(sum(r.get("start_cpu_s", 0) for r in reports), 3),
        worker_rss_mb=max((r.get("rss_mb", 0) for r in reports), default=0),
        # the host baselines' TCP connections, opened before the start gate (the slowest rank)
        **({"connect_seconds": round(max(r["setup_seconds"] for r in reports), 3)}
           if all("setup_seconds" in r for r in reports) else {}),
        worker_pss_mb=round(sum(r.get("pss_mb", 0) for r in reports), 1),
        algorithm=spec.algorithm,
        **({"density": spec.density, "pattern": spec.pattern, "zero_workers": spec.zero_workers,
            "blocks_sent": sum(r.get("blocks_sent", 0) for r in reports),
            # of the retransmissions, the non-participants' zero probes (hosts/sparse_agent.py)
            "probes": sum(r.get("probes", 0) for r in reports),
            # data packets sent again on the root's release of a held-back round (not resends)
            "releases": sum(r.get("releases", 0) for r in reports)} if SCHEMES[spec.algorithm].sparse else {}),
        max_abs_error=worst, error_bound=bound,
        # the ranks' own round trips (each rank's least latency sample, no straggler in it): the
        # median, the round trip a window-limited call's bound takes (emulation/training_model.py)
        rtt_min_ms=_median_ms([r.get("rtt_min") for r in reports]),
    )
    if spec.training:          # jobs that train (hosts/iterations.py): the slowest rank's time is the job's
        result.update(iterations=spec.iterations, iterations_per_s=round(spec.iterations / seconds, 4),
                      compute_ms=spec.compute_ms or 0.0, offset_s=reports[0].get("offset_s", 0.0),
                      # the slowest rank's calls, one per iteration (what the training bound's call models)
                      allreduce_seconds=max(reports, key=lambda r: r["seconds"]).get("allreduce_seconds"))
    return result
