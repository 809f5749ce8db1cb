"""The block-sparse (OmniReduce) pipeline end to end in Mininet.

One switch, 8 workers: every non-zero pattern at several densities, an all-zero input, 5%
loss; a k=4 fat-tree with an active tree link failing mid-run at three different moments
(the reroute must carry every completed round a worker may still ask for, see
controller/reroute/sparse_failover.py). Every run is exact and leaves nothing behind, and the
workers send about density x blocks data blocks, not all of them.
"""

from __future__ import annotations

import pytest

from agglab.ground import wire
from agglab.emulation.session import run_allreduce
from tests.leftovers import assert_clean

pytestmark = [pytest.mark.root, pytest.mark.mininet, pytest.mark.slow]

SPARSE = dict(algorithm="omnireduce", workers=8)
ELEMENTS = 65_536                       # 256 K-blocks per worker


def _blocks_sent_ok(r: dict, density: float, elements: int, workers: int) -> None:
    """Data K-blocks sent ~ density x blocks per worker. The lead round announces each
    column's first block, so no zero block is forced; with the default (unbounded)
    look-ahead a worker sends exactly its non-zero blocks: a little allowance for rounding."""
    blocks = -(-elements // wire.K)
    nonzero = round(density * blocks)
    sent = r["blocks_sent"]
    assert sent >= workers * nonzero, r
    assert sent <= workers * (nonzero + 8), r


@pytest.mark.parametrize("pattern,density", [
    ("random", 1.0), ("random", 0.1), ("random", 0.01),
    ("overlap", 0.1), ("overlap", 0.01),
    ("disjoint", 0.1), ("disjoint", 0.01), ("disjoint", 1.0),
])
def test_one_switch_patterns_exact(pattern, density):
    r = run_allreduce(elements=ELEMENTS, pattern=pattern, density=density, seed=5, **SPARSE)
    assert r["exact"], r.get("errors")
    _blocks_sent_ok(r, density, ELEMENTS, 8)
    assert_clean()


def test_all_zero_input_exact():
    r = run_allreduce(elements=ELEMENTS, density=0.0, seed=6, **SPARSE)
    assert r["exact"], r.get("errors")
    _blocks_sent_ok(r, 0.0, ELEMENTS, 8)
    assert r["blocks_sent"] < 8 * (ELEMENTS // wire.K)      # zero columns are mostly skipped
    assert_clean()


def test_loss_5_percent_exact():
    r = run_allreduce(elements=ELEMENTS // 2, density=0.1, loss=0.05, seed=7, **SPARSE)
    assert r["exact"], r.get("errors")
    assert r["retransmissions"] > 0
    _blocks_sent_ok(r, 0.1, ELEMENTS // 2, 8)
    assert_clean()


def test_some_workers_without_any_non_zero_block_exact():
    r = run_allreduce(elements=ELEMENTS, density=0.1, pattern="random", zero_workers=3, seed=8, **SPARSE)
    assert r["exact"], r.get("errors")
    assert r["zero_workers"] == 3
    blocks = ELEMENTS // wire.K
    nonzero = round(0.1 * blocks)
    # the zero workers send nothing (their lead announced no block in any column)
    assert 5 * nonzero <= r["blocks_sent"] <= 5 * (nonzero + 8), r
    assert_clean()


@pytest.mark.parametrize("tree,at", [("spt", 0.2), ("rat", 0.5), ("packing", 0.8), ("spt", 0.95)])
def test_fat_tree_link_failure_mid_run_exact(tree, at):
    """An active tree link fails at `at` of the blocks: the controller carries every round a
    worker may still need (from whichever old-tree switch holds it) into the new tree."""
    r = run_allreduce(topology="fattree", k=4, elements=262_144, density=0.2, tree=tree,
                      seed=21, fail=[f"tree@{at}"], **SPARSE)
    assert r["exact"], r.get("errors")
    (f,) = r["failures"]
    assert f["on_tree"] and f["epoch"] == 1 and f["at"] < 1, f
    assert r["epoch"] == 1 and r["density"] == 0.2
    assert_clean()
