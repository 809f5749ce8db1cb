"""The consistency check carried by the lead packet of slot 0.

Why: the switch adds whatever arrives on a slot.  If one worker passes a
shorter array, a different dtype or a different window, the others would
silently return garbage (or wait forever for blocks nobody sends).  Instead
every worker puts a few check lanes in its slot-0 lead packet and verifies the
aggregate before it trusts any data:

* for each checked quantity v (array length L, slots in use S) the lanes carry v and
  v*v split into 16-bit limbs, so sums over <= 32,768 workers fit in int32; with
  the limb sums recombined exactly, (sum v_i)^2 == n * sum v_i^2 holds iff all
  v_i are equal (Cauchy-Schwarz, equality case);
* one lane per supported dtype is 1 for the sender's dtype, so the own-dtype
  lane equals n iff all workers agree, and the sum of those lanes counts the
  contributions (catches `workers` disagreeing with the switch's fan_in).
"""

from __future__ import annotations

import numpy as np

from agglab.ground import wire

DTYPES = (np.dtype(np.float32), np.dtype(np.int32))
_VALUE_LIMBS, _SQUARE_LIMBS = 4, 8            # v < 2^64, v*v < 2^128
_PER_QUANTITY = _VALUE_LIMBS + _SQUARE_LIMBS
QUANTITIES = ("length", "window")
_DTYPE_LANE = _PER_QUANTITY * len(QUANTITIES)
LANES_USED = _DTYPE_LANE + len(DTYPES)
assert LANES_USED <= wire.K, f"AGG_K={wire.K} too small for the {LANES_USED} consistency lanes"


class ConsistencyError(ValueError):
    """The workers of one allreduce disagree; returning a result would be wrong."""


class LengthMismatchError(ConsistencyError):
    pass


class DtypeMismatchError(ConsistencyError):
    pass


class WindowMismatchError(ConsistencyError):
    pass


class WorkerCountMismatchError(ConsistencyError):
    pass


def _limbs(value: int, count: int) -> list[int]:
    if not 0 <= value < 1 << (16 * count):
        raise ValueError(f"{value} does not fit in {count} 16-bit limbs")
    return [(value >> (16 * i)) & 0xFFFF for i in range(count)]


def _join(limbs) -> int:
    return sum(int(v) << (16 * i) for i, v in enumerate(limbs))


def lead_lanes(*, length: int, window: int, dtype: np.dtype) -> np.ndarray:
    """The K int32 lanes of this worker's slot-0 lead packet."""
    lanes = np.zeros(wire.K, dtype=np.int32)
    for q, value in enumerate((length, window)):
        base = q * _PER_QUANTITY
        lanes[base:base + _VALUE_LIMBS] = _limbs(value, _VALUE_LIMBS)
        lanes[base + _VALUE_LIMBS:base + _PER_QUANTITY] = _limbs(value * value, _SQUARE_LIMBS)
    lanes[_DTYPE_LANE + DTYPES.index(np.dtype(dtype))] = 1
    return lanes


def check_lead(total: np.ndarray, *, n: int, rank: int, length: int, window: int,
               dtype: np.dtype) -> None:
    """Raise a ConsistencyError subclass unless the aggregated lanes prove agreement."""
    total = [int(v) for v in total]
    per_dtype = total[_DTYPE_LANE:_DTYPE_LANE + len(DTYPES)]
    if sum(per_dtype) != n:
        raise WorkerCountMismatchError(
            f"rank {rank}: the switch aggregated {sum(per_dtype)} contributions but workers={n}; "
            f"the agg_job fan_in and the agents' worker count disagree")
    mine = DTYPES.index(np.dtype(dtype))
    if per_dtype[mine] != n:
        seen = ", ".join(f"{c} x {d}" for d, c in zip(DTYPES, per_dtype) if c)
        raise DtypeMismatchError(f"rank {rank}: array dtype {np.dtype(dtype)} but the workers "
                                 f"sent {seen}; all workers must use the same dtype")
    for q, (name, value, exc) in enumerate((("length", length, LengthMismatchError),
                                            ("window", window, WindowMismatchError))):
        base = q * _PER_QUANTITY
        s1 = _join(total[base:base + _VALUE_LIMBS])
        s2 = _join(total[base + _VALUE_LIMBS:base + _PER_QUANTITY])
        if s1 * s1 != n * s2:
            raise exc(f"rank {rank}: {name} {value} differs from the other workers' "
                      f"(mean {name} {s1 / n:g} over {n} workers); all workers must pass "
                      f"the same {name}")
