"""A pool of P aggregators out of ATP_POOL (`--atp-pool-slots P`), kept by the hosts.

Why on the hosts: atp.p4 indexes its aggregators by crc32(job, seq) % ATP_POOL, a constant
of the program. A pool smaller than the jobs' demand (ATP's setting: the switch's memory
is shared by more jobs than it holds) needs no change to the switch if every job numbers
its blocks with only those sequence numbers that hash below P: the switch then holds at
most P aggregators, and jobs collide there exactly as in a pool of P. Workers and the PS
agree on the numbering (`seq_indices`), a pure function of (job, call, blocks, P); the
switch's registers are the witness (its atp_bitmap is never non-zero at or above P).
"""

from __future__ import annotations

import zlib
from functools import lru_cache

import numpy as np

from agglab.ground import wire

POOL = wire.CONST["ATP_POOL"]


def aggregator(job: int, seq: int) -> int:
    """atp.p4's aggregator of (job, seq): crc32 over job (1 byte) ++ seq (4 bytes, big-endian)."""
    return zlib.crc32(bytes((job,)) + seq.to_bytes(4, "big")) % POOL


@lru_cache(maxsize=64)
def seq_indices(job: int, gen: int, blocks: int, slots: int, seq_bits: int) -> tuple[np.ndarray, dict[int, int]]:
    """Block b of call `gen` travels as index idx[b] (seq = gen << seq_bits | idx[b]): the
    b-th index whose seq hashes into aggregators 0..slots-1; and the map back, index -> b.
    With slots = POOL every index qualifies (idx[b] = b). Raises when the index space
    (below the FIN index, all ones) runs out."""
    if slots >= POOL:
        idx = np.arange(blocks)
    else:
        found, i, limit = [], 0, (1 << seq_bits) - 1
        while len(found) < blocks:
            if i >= limit:
                raise ValueError(f"--atp-pool-slots {slots}: {blocks} blocks need more sequence numbers than "
                                 f"{seq_bits} bits hold")
            if aggregator(job, gen << seq_bits | i) < slots:
                found.append(i)
            i += 1
        idx = np.array(found)
    return idx, {int(v): b for b, v in enumerate(idx)}
