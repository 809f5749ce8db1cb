"""Which blocks a sparse worker sends, and what it announces: computed once, up front.

Why up front: the sparse agent decides per received result whether it sends
and what `next_block` it announces; doing a column scan there would put an
O(column) loop on the per-packet path.  Everything depends only on the
worker's own data, the slot count S and the look-ahead, so it is one
vectorised pass before the first packet.

Units: the wire's `block` is always a K-value block ("K-block"); the user's
`block_size` (a multiple of K) only decides what counts as non-zero: a
block_size block is non-zero if any of its values is, and then all its
K-blocks travel (they sit on consecutive columns).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from agglab.ground import wire
from agglab.hosts.diagnostics import AllreduceStats

K = wire.K
NONE = wire.NEXT_NONE


@dataclass
class SparseStats(AllreduceStats):
    """AllreduceStats plus what the sparse pipeline adds.

    blocks_sent: data K-blocks this worker sent (first transmissions; lead, probes
    and retransmissions excluded): its non-zero blocks, plus, with a bounded look-ahead,
    a zero block at most every `lookahead` rounds of a column (the lead announces each
    column's first block, so no zero block s is forced).
    rounds: sparse rounds whose result this worker accepted (the union of all
    workers' sent blocks).  probes: zero packets sent while not participating.
    acks: header-only acknowledgements (results accepted without sending in the next round).
    releases: data packets sent again at once because the root released a round held back
    for another worker's acknowledgement (not counted as retransmissions: the held copy
    was dropped before it touched any state).
    """
    blocks_sent: int = 0
    rounds: int = 0
    probes: int = 0
    acks: int = 0
    releases: int = 0


def nonzero_kblocks(blocks: np.ndarray, block_size: int) -> np.ndarray:
    """Boolean per K-block row of `blocks` (nb x K): its block_size block holds a non-zero."""
    if block_size < K or block_size % K:
        raise ValueError(f"block_size must be a positive multiple of K={K}, got {block_size}")
    nb, g = blocks.shape[0], block_size // K
    rows = np.any(blocks, axis=1)          # non-zero is true: no temporary array of the comparison
    big = np.zeros(-(-nb // g) * g, dtype=bool)
    big[:nb] = rows
    return np.repeat(big.reshape(-1, g).any(axis=1), g)[:nb]


def announcements(mask: np.ndarray, S: int, lookahead: int) -> np.ndarray:
    """ann[m]: the next_block a worker announces when it sends K-block m.

    = min(its next non-zero K-block after m in m's column, m + lookahead*S), or NONE
    when that lies beyond the array.  Column s holds blocks s, s+S, ...: reshaping to
    (rows, S) makes each column a matrix column, and a reversed running minimum of
    "row index where non-zero" gives every row's next non-zero row at once.
    """
    nb = mask.size
    if lookahead < 1:
        raise ValueError(f"lookahead must be >= 1 (rounds of a column), got {lookahead}")
    rows = -(-nb // S)
    big = np.int64(1) << 40
    m = np.zeros(rows * S, dtype=bool)
    m[:nb] = mask
    r = np.arange(rows, dtype=np.int64)[:, None]
    at = np.where(m.reshape(rows, S), r, big)
    suffix = np.minimum.accumulate(at[::-1], axis=0)[::-1]          # min over rows >= r
    after = np.vstack([suffix[1:], np.full((1, S), big)])            # min over rows > r
    nxt_row = np.minimum(after, r + lookahead)
    nxt = (nxt_row * S + np.arange(S)).reshape(-1)[:nb]
    return np.where(nxt < nb, nxt, NONE).astype(np.int64)


def first_blocks(mask: np.ndarray, ann: np.ndarray, S: int) -> list[int]:
    """Per column s < S, the first K-block a worker sends, announced in the lead round:
    s if it is non-zero, else what it would announce after sending s (ann[s]); NONE for a
    column beyond the array."""
    return [NONE if s >= mask.size else s if mask[s] else int(ann[s]) for s in range(S)]


def sent_blocks(mask: np.ndarray, ann: np.ndarray, S: int) -> list[int]:
    """The K-blocks a worker with non-zero mask `mask` and announcements `ann` sends: the
    chain first_blocks[s], ann[...], ... per column.

    Independent of the other workers: a worker sends exactly the blocks it announced
    (the first one in the lead round), whatever rounds the others add in between.
    """
    out = []
    for m in first_blocks(mask, ann, S):
        while m != NONE:
            out.append(m)
            m = int(ann[m])
    return sorted(out)
