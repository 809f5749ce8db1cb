"""SwitchML quantisation: no int32 overflow in the switch, and a provable error bound.

Why property tests: the guarantee must hold for every input, number of workers
and magnitude mix (a worker with tiny values next to one with huge values is the
interesting case), not only for the examples we would think of.
"""

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from hypothesis.extra.numpy import arrays

from agglab.ground import wire
from agglab.hosts import quantization as qz

K = wire.K
# |x| < 2^119 keeps the exact sum of <= 256 workers (MAX_RANKS) inside float32 range (beyond
# it the result is +-inf, exactly as float32 arithmetic would give).
finite32 = st.floats(-2.0**119, 2.0**119, width=32, allow_nan=False, allow_infinity=False)


@st.composite
def worker_block(draw):
    """One worker's block: either arbitrary float32s or uniform mantissas at a random scale."""
    if draw(st.booleans()):
        return draw(arrays(np.float32, K, elements=finite32))
    k = draw(st.integers(-140, 119))
    seed = draw(st.integers(0, 2**32 - 1))
    x = np.random.default_rng(seed).uniform(-1.0, 1.0, K) * 2.0**k
    return x.astype(np.float32)


@settings(max_examples=300, deadline=None)
@given(st.integers(1, wire.MAX_RANKS).flatmap(
    lambda n: st.lists(worker_block(), min_size=n, max_size=n)))
def test_sum_never_overflows_and_is_within_bound(blocks):
    n = len(blocks)
    exps = [qz.block_exponent(b) for b in blocks]
    known = [e for e in exps if e is not None]
    e = max(known) if known else None
    # float64 sum of <= 256 float32s: error <= n^2 2^e 2^-53, inside the bound's slack term
    exact = np.sum(np.array(blocks, dtype=np.float64), axis=0)
    if e is None:
        assert not exact.any()
        assert not qz.dequantize(np.zeros(K, np.int32), None, n).any()
        return
    f = qz.scale(e, n)
    qs = [qz.quantize(b, e, n) for b in blocks]
    for b, q in zip(blocks, qs):        # the clip guard never fired: pure round(x * f)
        assert np.array_equal(q.astype(np.float64), np.rint(b.astype(np.float64) * f))
    wide = np.sum([q.astype(np.int64) for q in qs], axis=0)
    assert np.abs(wide).max() <= qz.INT32_MAX
    wrapped = np.sum(qs, axis=0, dtype=np.int32)          # what the switch computes
    assert np.array_equal(wrapped.astype(np.int64), wide)
    got = qz.dequantize(wrapped, e, n)
    assert got.dtype == np.float32
    err = np.abs(got.astype(np.float64) - exact)
    assert err.max() <= qz.error_bound(e, n), (err.max(), qz.error_bound(e, n))
    biased = np.array([e + wire.EXP_BIAS], np.uint8)
    assert np.array_equal(qz.dequantize_blocks(wrapped[None, :], biased, n)[0], got)


@pytest.mark.parametrize("n", [1, 32, 33, 100, 255, wire.MAX_RANKS])
def test_largest_values_of_every_worker_stay_within_int32(n):
    """Every worker at the largest float32 below 2^e, both signs: the rounding argument of
    the module docstring at its tightest (n = 256 leaves under half a step), no clip."""
    for e in (-30, 0, 1, 77):
        top = np.float32(np.nextafter(np.float32(2.0**e), np.float32(0)))
        for sign in (1, -1):
            x = np.full(K, sign * top, np.float32)
            raw = np.rint(x.astype(np.float64) * qz.scale(e, n))
            assert n * abs(int(raw[0])) <= qz.INT32_MAX, (n, e)
            assert np.array_equal(qz.quantize(x, e, n).astype(np.float64), raw)


def test_too_small_exponent_would_overflow_so_the_guard_matters():
    """With e one less than required, n maximal blocks exceed int32: the check above is real."""
    n, e = 4, 3
    x = np.full(K, 2.0**e * 0.99, np.float32)
    raw = np.rint(x.astype(np.float64) * qz.scale(e - 1, n))
    assert n * raw.max() > qz.INT32_MAX
    assert n * int(qz.quantize(x, e - 1, n).max()) <= qz.INT32_MAX   # clipped


@pytest.mark.parametrize("peak,expected", [
    (1.0, 1), (0.75, 0), (0.5, 0), (2.0**-3, -2), (3.0, 2), (2.0**100, 101),
    (1e-45, qz.E_MIN), (0.0, None)])
def test_block_exponent_values(peak, expected):
    x = np.zeros(K, np.float32)
    x[7] = -peak
    assert qz.block_exponent(x) == expected
    if expected is not None:
        assert abs(x).max() < 2.0**expected


def test_unrepresentable_inputs_raise():
    with pytest.raises(ValueError, match="cannot be quantised"):
        qz.block_exponent(np.array([2.0**127], np.float32))
    with pytest.raises(ValueError, match="NaN"):
        qz.biased_exponents(np.array([[np.nan]], np.float32))
    with pytest.raises(ValueError, match="workers"):
        qz.scale(0, wire.MAX_RANKS + 1)


def test_bound_is_not_vacuous():
    """The bound is about n half-steps: for n=8, e=0 that is ~1.9e-9, not something huge."""
    assert qz.error_bound(0, 8) < 8 * 0.6 * 8 / qz.INT32_MAX + 8 * 2.0**-24 * 1.01
    assert qz.error_bound(None, 8) == 0.0


@pytest.mark.parametrize("n,e", [(2, 0), (8, 5), (32, -20)])
def test_adversarial_rounding_comes_close_to_the_bound(n, e):
    """All workers lose almost half a step in the same direction: the error approaches
    n * 0.5 / f, so a bound that forgot a term (or a half-step) would fail here."""
    f = qz.scale(e, n)
    # about 1 in 100 candidates lands within (0.49, 0.5) of a step: draw twice the n * K needed
    cand = np.random.default_rng(n).uniform(0, 2.0**e, max(200_000, 200 * n * K)).astype(np.float32)
    frac = cand.astype(np.float64) * f % 1.0
    picked = cand[(frac > 0.49) & (frac < 0.5)][: n * K].reshape(n, K)
    q = sum(qz.quantize(b, e, n).astype(np.int64) for b in picked)
    exact = picked.astype(np.float64).sum(axis=0)
    err64 = np.abs(q / f - exact).max()           # before the float32 conversion
    assert 0.45 * n / f < err64 <= qz.quantization_error_bound(e, n)
    err = np.abs(qz.dequantize(q.astype(np.int32), e, n).astype(np.float64) - exact).max()
    assert err <= qz.error_bound(e, n)
