"""OmniReduce's wire model (emulation/wire_model.sparse_acks / sparse_seconds): the header-only
ACKs a call sends up, besides its blocks and lead frames, counted here by hand.

Why: the agent acknowledges a result with a 58-byte frame whenever it sends nothing in its
column's next round (hosts/sparse_agent.py); at density 0.01 with overlapping blocks that is
one per column per worker, 16 frames on each host's way up, which a model of data frames
alone left out (1.8% of that link's bytes).
"""

from __future__ import annotations

import pytest

from agglab.controller import topologies
from agglab.emulation import wire_model
from agglab.ground import wire
from agglab.ground.runspec import RunSpec


def test_an_ack_for_every_round_whose_next_the_subtree_does_not_send():
    # one column, rounds 0 1 2: blocks {0} send nothing in 1 and 2 (ACKs after 0, 1 and 2);
    # blocks {0, 1, 2} send every next round (one ACK, after the last)
    assert wire_model.sparse_acks({0}, [0, 1, 2], 1) == 3
    assert wire_model.sparse_acks({0, 1, 2}, [0, 1, 2], 1) == 1
    assert wire_model.sparse_acks(set(), [0, 1, 2], 1) == 3
    # two columns (0 2 4 6 | 1 3 5), blocks {2, 3, 5}: column 0 ACKs after 2 (4 is not ours),
    # 4 and 6 (the end), not after 0 (2 is ours); column 1 only after 5 (the end): 3 + 1
    assert wire_model.sparse_acks({2, 3, 5}, [0, 1, 2, 3, 4, 5, 6], 2) == 4
    assert wire_model.sparse_acks({0}, [], 16) == 0                # no sparse round: no ACK


def test_the_busiest_link_of_a_dense_sparse_call_counts_its_acks():
    """2 workers on one switch, density 1 (every K-block non-zero), 8 K-blocks on a window of
    2: each worker sends its 8 blocks and 2 lead frames up and ACKs the last round of each
    column (2 x 58 bytes): 10 x 314 + 2 x 58 = 3,256 bytes; down 10 x 314 = 3,140. At 1 Mb/s,
    links without a bucket: 3,256 x 8 / 1e6 = 26.048 ms."""
    spec = RunSpec(workers=2, elements=8 * wire.K, algorithm="omnireduce", density=1.0,
                   pattern="overlap", window=2, bw=1.0)
    g = topologies.for_run(spec)
    g.graph["buckets"] = False
    assert wire.FRAME_BYTES == 314 and wire.ACK_FRAME_BYTES == 58
    assert wire_model.sparse_seconds(spec, g) == pytest.approx(0.026048)
