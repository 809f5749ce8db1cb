"""The agents' fast view of an aggregation payload: field getters and the K lanes.

Why its own module: the dense agent (hosts/agent.py) and the sparse agent
(hosts/sparse_agent.py) read the same agg_h fields of every result on their hot
path; one `unpack` into struct words and a shift-and-mask per field is the cheapest
way in Python, and both agents must read them the same way. Packing is
hosts/protocol.py's HeaderPacker; both follow agglab.ground.wire, which reads the P4 header.

    w = unpack(payload)
    FLAGS(w), SLOT(w), VER(w), BLOCK(w), EXP(w), NEXT_BLOCK(w), JOB(w), WORKER(w)
    lanes(payload)            # K big-endian int32, no copy
    lanes_of(rows)            # the lanes of a whole batch (rows: one payload per row)
"""

from __future__ import annotations

import numpy as np

from agglab.ground import wire
from agglab.hosts.protocol import LAYOUT, values_of as lanes  # noqa: F401 (K lanes, no copy)

K = wire.K
BE = np.dtype(">i4")                 # lanes on the wire: big-endian int32
HEADER_BYTES, PAYLOAD_BYTES = wire.AGG_HEADER_BYTES, wire.PAYLOAD_BYTES
unpack = wire.AGG_STRUCT.unpack_from


def getter(name: str):
    """words -> the agg_h field `name` (words from `unpack`)."""
    word, shift, mask = LAYOUT[name]
    return lambda words: (words[word] >> shift) & mask


FLAGS, SLOT, VER, BLOCK, EXP = map(getter, ("flags", "slot", "ver", "block", "exp"))
JOB, WORKER, NEXT_BLOCK = map(getter, ("job", "worker", "next_block"))


def lanes_of(rows: np.ndarray) -> np.ndarray:
    """The K lanes of every payload in `rows`, as a (n, K) big-endian int32 view."""
    return rows[:, HEADER_BYTES:PAYLOAD_BYTES].view(BE)
