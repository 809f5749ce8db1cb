"""SwitchML fixed-point quantisation: float32 blocks to int32 lanes the switch can add.

Why: the switch only adds 32-bit integers.  Every worker scales its block by the
same factor, chosen from the largest exponent among all workers so that the sum
of n scaled blocks cannot overflow int32 (SwitchML, NSDI'21):

    e = block_exponent(x) = floor(log2(max|x|)) + 1      so max|x| < 2^e
    f = (2^31 - 1) / (n * 2^e)                           (n = number of workers)
    q = round(x * f)          |q| <= floor((2^31-1)/n)   (|x| < 2^e, x float32, n <= 256)
    sum of n q's              |sum| <= 2^31 - 1          (no wrap-around)
    result = float32(sum / f)

Why n <= 256 (MAX_RANKS, the header's 8-bit worker field): a float32 below 2^e is at most
2^e (1 - 2^-24), so |x f| <= (2^31-1)/n - m with m = (2^31-1) 2^-24 / n, and rounding
stays within floor((2^31-1)/n) while m + frac((2^31-1)/n) >= 1/2: for every n <= 255
m > 1/2, and n = 256 has frac = 0.996. The fan-in of one switch is not what limits n:
a tree of switches sums the quantised values of all n workers.

Error bound (per element, `error_bound(e, n)`): every worker's rounding costs at
most half a step 1/f, so before conversion |sum/f - exact| <= n * 0.5 / f; the
float64 arithmetic adds < 2^-22 steps per worker, which we include as slack, and
the final float32 conversion adds a relative 2^-24 (plus 2^-150 for subnormals):

    q_err = n * (0.5 + 2^-20) / f
    bound = q_err + 2^-24 * (n * 2^e + q_err) + 2^-150

On the wire the exponent is biased: exp field = e + wire.EXP_BIAS, and 0 means
"all-zero block" (the result is exactly 0).  Exponents are clamped up to
E_MIN = 1 - EXP_BIAS (tiny values then round to fewer steps, still within the
bound); values >= 2^E_MAX cannot be represented and raise ValueError.  A sum
beyond float32 range becomes +-inf, as in plain float32 arithmetic.
"""

from __future__ import annotations

import math

import numpy as np

from agglab.ground import wire

INT32_MAX = 2**31 - 1
E_MIN = 1 - wire.EXP_BIAS          # biased 1: smallest representable exponent
E_MAX = 255 - wire.EXP_BIAS        # biased 255
ZERO = 0                           # biased exponent of an all-zero block


def _check_n(n: int) -> None:
    if not 1 <= n <= wire.MAX_RANKS:
        raise ValueError(f"number of workers n={n} outside 1..{wire.MAX_RANKS}")


def block_exponent(x: np.ndarray) -> int | None:
    """floor(log2(max|x|)) + 1, clamped up to E_MIN; None for an all-zero block."""
    b = int(biased_exponents(np.asarray(x, dtype=np.float32).reshape(1, -1))[0])
    return None if b == ZERO else b - wire.EXP_BIAS


def biased_exponents(blocks: np.ndarray) -> np.ndarray:
    """Biased exponent (uint8, 0 = all zero) of every row of a 2-D float array, vectorised.

    np.frexp gives m in [0.5, 1) with v = m * 2^k, so k = floor(log2 v) + 1 exactly,
    with no floating-point log involved.
    """
    peak = np.abs(np.asarray(blocks, dtype=np.float64)).max(axis=1, initial=0.0)
    if not np.all(np.isfinite(peak)):
        raise ValueError("cannot quantise NaN or infinite values")
    _, k = np.frexp(peak)
    if k.size and int(k.max()) > E_MAX:
        raise ValueError(f"|value| >= 2^{E_MAX} cannot be quantised (exponent field is 8 bits)")
    biased = np.clip(k, E_MIN, E_MAX) + wire.EXP_BIAS
    return np.where(peak > 0, biased, ZERO).astype(np.uint8)


def scale(e: int, n: int) -> float:
    """f = (2^31 - 1) / (n * 2^e), in float64 (exact power-of-two scaling of INT32_MAX/n)."""
    _check_n(n)
    return math.ldexp(INT32_MAX / n, -int(e))


def quantize(x: np.ndarray, e: int, n: int) -> np.ndarray:
    """round(x * f) as int32; e must be >= block_exponent(x) (the agreed max over workers).

    The clip to +-floor((2^31-1)/n) is a guard that never triggers for valid input
    (tests/test_hosts_quantization.py proves it); it keeps a caller bug from
    turning into an int32 wrap-around in the switch.
    """
    limit = INT32_MAX // n
    q = np.rint(np.asarray(x, dtype=np.float64) * scale(e, n))
    return np.clip(q, -limit, limit).astype(np.int32)


def dequantize(total: np.ndarray, e: int | None, n: int) -> np.ndarray:
    """float32(sum / f); e None means the agreed block was all zero (result 0)."""
    total = np.asarray(total)
    if e is None:
        return np.zeros(total.shape, dtype=np.float32)
    return (total.astype(np.float64) / scale(e, n)).astype(np.float32)


def dequantize_blocks(totals: np.ndarray, biased: np.ndarray, n: int) -> np.ndarray:
    """Vectorised `dequantize` of rows `totals[b]` with biased exponents `biased[b]`."""
    _check_n(n)
    biased = np.asarray(biased, dtype=np.int64)
    steps = np.ldexp(np.float64(n) / INT32_MAX, biased - wire.EXP_BIAS)   # 1/f per row
    out = totals.astype(np.float64) * steps[:, None]
    out[biased == ZERO] = 0.0
    return out.astype(np.float32)


def error_bound(e: int | None, n: int) -> float:
    """Per-element bound on |dequantize(sum of quantize) - exact sum| (see module docstring)."""
    if e is None:
        return 0.0
    q_err = quantization_error_bound(e, n)
    return q_err + 2.0**-24 * (n * math.ldexp(1.0, int(e)) + q_err) + 2.0**-150


def quantization_error_bound(e: int | None, n: int) -> float:
    """The rounding part alone, |sum/f - exact| before the float32 conversion: n half-steps."""
    return 0.0 if e is None else n * (0.5 + 2.0**-20) / scale(e, n)
