"""The sparse workload generator and the agent's block bookkeeping, without any network.

Why: the checker recomputes every worker's input from (rank, seed), and the
agent's blocks_sent and announcements are derived from the data alone, so both
must be exactly reproducible and exactly what their docstrings promise.
"""

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from agglab.ground import wire
from agglab.hosts.sparse_blocks import NONE, announcements, nonzero_kblocks, sent_blocks
from agglab.hosts.sparse_workload import (PATTERNS, expected_sparse_sum, nonzero_block_ids,
                                   sparse_gradient)

K = wire.K


def blocks_of(x, block_size):
    padded = np.zeros(-(-x.size // block_size) * block_size, x.dtype)
    padded[:x.size] = x
    return set(np.nonzero(padded.reshape(-1, block_size).any(axis=1))[0].tolist())


@pytest.mark.parametrize("dtype", ["int32", "float32"])
@pytest.mark.parametrize("pattern", PATTERNS)
@pytest.mark.parametrize("density", [1.0, 0.5, 0.1, 0.01, 0.0])
def test_density_is_the_fraction_of_non_zero_blocks(dtype, pattern, density):
    elements, bs = K * 1000 + 30, 2 * K
    nblocks = -(-elements // bs)
    for rank in range(3):
        x = sparse_gradient(rank, elements, dtype, density, pattern, bs, seed=4)
        assert x.dtype == np.dtype(dtype) and x.shape == (elements,)
        assert len(blocks_of(x, bs)) == round(density * nblocks)
        assert blocks_of(x, bs) == set(nonzero_block_ids(rank, elements, density, pattern, bs, 4))
        assert np.array_equal(x, sparse_gradient(rank, elements, dtype, density, pattern, bs, 4))


def test_patterns_across_ranks():
    elements, d, n = K * 2000, 0.1, 8
    ids = {p: [set(nonzero_block_ids(r, elements, d, p, K, seed=1)) for r in range(n)] for p in PATTERNS}
    assert all(s == ids["overlap"][0] for s in ids["overlap"])
    assert all(a.isdisjoint(b) for i, a in enumerate(ids["disjoint"]) for b in ids["disjoint"][i + 1:])
    assert len(set.union(*ids["random"])) > 1.5 * len(ids["random"][0])     # ranks differ
    x0, x1 = (sparse_gradient(r, elements, "int32", d, "overlap", K, 1) for r in (0, 1))
    assert not np.array_equal(x0, x1)                                       # same blocks, new values
    other_seed = set(nonzero_block_ids(0, elements, d, "random", K, seed=2))
    assert other_seed != ids["random"][0]


def test_disjoint_beyond_one_wraps_and_shares_evenly():
    """density * workers = 0.4 * 4 = 1.6: every block is held by at most ceil(1.6) = 2 ranks."""
    elements, n = K * 100, 4
    owners = np.zeros(100, int)
    for r in range(n):
        owners[nonzero_block_ids(r, elements, 0.4, "disjoint", K, seed=3)] += 1
    assert owners.max() == 2 and owners.min() >= 1 and owners.sum() == 160


@pytest.mark.parametrize("dtype", ["int32", "float32"])
def test_expected_sum(dtype):
    args = (K * 50 + 1, dtype, 0.3, "random", K, 7)
    exp = expected_sparse_sum(3, *args)
    acc = sum(sparse_gradient(r, *args).astype(np.float64 if dtype == "float32" else np.int64)
              for r in range(3))
    if dtype == "int32":
        assert exp.dtype == np.int32 and np.array_equal(exp, acc.astype(np.int32))
    else:
        assert exp.dtype == np.float64 and np.array_equal(exp, acc)


@pytest.mark.parametrize("bad,message", [
    (dict(density=1.5), r"density must be in \[0, 1\], got 1.5"),
    (dict(pattern="striped"), r"pattern must be one of \('random', 'overlap', 'disjoint'\), got 'striped'"),
    (dict(block_size=K + 1), f"block_size must be a positive multiple of K={K}, got {K + 1}"),
    (dict(dtype="float64"), r"dtype must be one of \('int32', 'float32'\), got 'float64'"),
    (dict(elements=-1), "elements must be >= 0, got -1"),
])
def test_a_bad_argument_is_named(bad, message):
    kw = dict(rank=0, elements=100, dtype="int32", density=0.5, pattern="random", block_size=K, seed=0) | bad
    with pytest.raises(ValueError, match=f"^{message}$"):
        sparse_gradient(**kw)


def test_zero_workers_have_nothing_and_change_nobody_else():
    args = (K * 40, "int32", 0.25, "disjoint", K, 3)
    for r in range(4):
        x = sparse_gradient(r, *args, zero_workers=2)
        if r < 2:
            assert not x.any()
        else:
            assert np.array_equal(x, sparse_gradient(r, *args)) and x.any()
    total = expected_sparse_sum(4, *args, zero_workers=2)
    assert np.array_equal(total, sparse_gradient(2, *args) + sparse_gradient(3, *args))
    with pytest.raises(ValueError, match="zero_workers must be >= 0, got -1"):
        sparse_gradient(0, *args, zero_workers=-1)


def test_nonzero_kblocks_spreads_a_block_to_its_k_sub_blocks():
    rows = np.zeros((10, K), np.int32)
    rows[1, 5] = 1                     # 2K-block 0
    rows[9, 0] = -3                    # 2K-block 4 (ragged end: 10 K-blocks)
    assert nonzero_kblocks(rows, K).tolist() == [i in (1, 9) for i in range(10)]
    assert nonzero_kblocks(rows, 2 * K).tolist() == [i in (0, 1, 8, 9) for i in range(10)]
    assert nonzero_kblocks(rows, 4 * K).tolist() == [i in (0, 1, 2, 3, 8, 9) for i in range(10)]
    with pytest.raises(ValueError, match=f"block_size must be a positive multiple of K={K}, got 3"):
        nonzero_kblocks(rows, 3)


def _reference_ann(mask, S, L):
    nb, out = len(mask), []
    for m in range(nb):
        nz = next((b for b in range(m + S, nb, S) if mask[b]), None)
        cap = m + L * S
        a = cap if nz is None else min(nz, cap)
        out.append(a if a < nb else NONE)
    return out


@settings(max_examples=150, deadline=None)
@given(st.lists(st.booleans(), max_size=200), st.integers(1, 20), st.integers(1, 6))
def test_announcements_match_a_plain_scan(mask, S, L):
    mask = np.array(mask, dtype=bool)
    ann = announcements(mask, S, L)
    assert ann.tolist() == _reference_ann(mask.tolist(), S, L)
    sent = sent_blocks(mask, ann, S)
    assert set(np.nonzero(mask)[0].tolist()) <= set(sent)          # every non-zero block travels
    for s in range(min(S, mask.size)):                              # silence never exceeds L rounds
        col = [b for b in sent if b % S == s]                       # (the lead announces the first:
        assert all(b2 - b1 <= L * S for b1, b2 in zip(col, col[1:]))
        assert not col or col[0] <= s + L * S                       # at most L rounds after s)
        if mask[s]:
            assert col[0] == s
