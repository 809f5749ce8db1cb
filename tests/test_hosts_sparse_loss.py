"""The sparse agent and the software switch together under loss: always the exact sum.

Why: the switch reuses a slot-version two rounds later; before acknowledgements a worker
that lost a result and sat out the next round could find it gone (its retransmission was
even taken as a new round, corrupting it).  Here every packet, in both directions,
is lost with 5 % probability (ACKs and probes included) on sparse data whose workers
skip many rounds; every worker must end with the exact int32 sum.
"""

from __future__ import annotations

import numpy as np
import pytest

from agglab.ground import wire
from agglab.softswitch.pipeline import Pipeline
from agglab.softswitch.star import star_commands
from agglab.testkit.fakenet import FakeNet

K = wire.K


def sparse_pipeline(n: int, job: int = 0) -> Pipeline:
    p = Pipeline(seed=0)
    for cmd in star_commands(n, job):
        p.command(cmd)
    return p


def sparse_ints(n: int, nblocks: int, density: float, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        a = rng.integers(-1000, 1000, (nblocks, K), dtype=np.int32)
        a[rng.random(nblocks) >= density] = 0
        out.append(a.reshape(-1))
    return out


def ok(results):
    bad = [r for r in results if isinstance(r, BaseException)]
    if bad:
        raise bad[0]
    return results


@pytest.mark.parametrize("seed", range(6))
def test_sparse_5_percent_loss_always_exact(seed):
    n = 4
    arrays = sparse_ints(n, 4 * 40, density=0.15, seed=seed)
    net = FakeNet(n, backend="pipeline", loss=0.05, seed=seed, pipeline=sparse_pipeline(n))
    results = ok(net.run(arrays, window=4, timeout=0.005, give_up=30, sparse=True, lookahead=4))
    want = np.sum(arrays, axis=0, dtype=np.int32)
    for out, st in results:
        assert np.array_equal(out, want)
    assert sum(st.acks for _, st in results) > 0
    assert sum(st.retransmissions for _, st in results) > 0


def test_sparse_no_loss_sends_acks_only_when_sitting_out():
    n = 3
    arrays = sparse_ints(n, 3 * 20, density=0.3, seed=11)
    net = FakeNet(n, backend="pipeline", pipeline=sparse_pipeline(n))
    results = ok(net.run(arrays, window=3, timeout=0.05, give_up=30, sparse=True))
    want = np.sum(arrays, axis=0, dtype=np.int32)
    for out, st in results:
        assert np.array_equal(out, want)
        # one ACK per accepted result it did not follow with data (column ends included)
        assert 0 < st.acks <= st.rounds
