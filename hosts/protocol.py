"""The aggregation packet on the host side: fast plain helpers (the scapy layer is
hosts/scapy_layer.py).

Why two representations: scapy is the convenient way to build, dissect and
print packets in tests, pcaps and debugging, but it costs tens of
microseconds per packet, far too much for the data path of eight agents on two
cores.  The data path therefore uses `encode`/`decode` and `HeaderPacker`
(struct + numpy only).  Both are generated from `agglab.ground.wire` (which reads the
P4 headers), and tests/test_hosts_protocol.py proves they produce the same
bytes, so neither can drift from the P4 program. Why two modules: importing scapy
costs each agent process a third of a second of CPU at start, while seven other
agents and the switch already run; the data path never needs it.
"""

from __future__ import annotations

import numpy as np

from agglab.ground import wire

K = wire.K
HEADER_BYTES = wire.AGG_HEADER_BYTES
PAYLOAD_BYTES = wire.PAYLOAD_BYTES
_BE_INT32 = np.dtype(">i4")


def _layout() -> dict[str, tuple[int, int, int]]:
    """field name -> (struct word index, shift within the word, mask), from wire.AGG_STRUCT."""
    codes = wire.AGG_STRUCT.format.lstrip("!")
    widths = {"B": 8, "H": 16, "I": 32}
    out, word, used = {}, 0, 0
    for name, bits in wire.AGG_FIELDS:
        used += bits
        out[name] = (word, widths[codes[word]] - used, (1 << bits) - 1)
        if used == widths[codes[word]]:
            word, used = word + 1, 0
    return out


LAYOUT = _layout()


class HeaderPacker:
    """Packs agg_h quickly: fields fixed for a whole allreduce are folded in once.

    `pack(**varying)` costs one struct.pack plus a few shifts; values are
    masked to their width (callers on the data path pass valid values; use
    `wire.pack_agg` when validation matters).
    """

    def __init__(self, **fixed: int) -> None:
        self._base = [0] * len(wire.AGG_STRUCT.format.lstrip("!"))
        for name, value in fixed.items():
            word, shift, mask = LAYOUT[name]
            self._base[word] |= (int(value) & mask) << shift

    def pack(self, **varying: int) -> bytes:
        words = list(self._base)
        for name, value in varying.items():
            word, shift, mask = LAYOUT[name]
            words[word] |= (value & mask) << shift
        return wire.AGG_STRUCT.pack(*words)

    def compile(self, *names: str):
        """A function packing agg_h from the fixed fields and `names`, given positionally.

        Generated source (as collections.namedtuple does), because the agents call it once
        per packet and pack(**fields) builds a dict and loops over it every time: ~0.4 us
        instead of ~1.5 us, at 16,000 packets per worker and second."""
        per_word: dict[int, list[str]] = {}
        for name in names:
            word, shift, mask = LAYOUT[name]
            per_word.setdefault(word, []).append(f"(({name} & {mask}) << {shift})")
        words = ", ".join(" | ".join([str(base), *per_word.get(w, [])]) for w, base in enumerate(self._base))
        namespace = {"_pack": wire.AGG_STRUCT.pack}
        exec(f"def pack({', '.join(names)}):\n    return _pack({words})\n", namespace)
        return namespace["pack"]


def encode(header_fields: dict, values: np.ndarray) -> bytes:
    """UDP payload = agg_h (fields as in wire.pack_agg, missing ones 0) + K big-endian int32."""
    vals = np.asarray(values)
    if vals.shape != (K,):
        raise ValueError(f"an aggregation packet carries exactly K={K} values, got shape {vals.shape}")
    if vals.dtype != np.int32:
        raise TypeError(f"values must be int32 (quantise floats first), got {vals.dtype}")
    return wire.pack_agg(**header_fields) + vals.astype(_BE_INT32).tobytes()


def decode(payload: bytes | bytearray | memoryview) -> tuple[dict, np.ndarray]:
    """Inverse of `encode`: (header dict, int32 array of K values). Raises ValueError if short."""
    if len(payload) < PAYLOAD_BYTES:
        raise ValueError(f"aggregation payload has {len(payload)} bytes, need {PAYLOAD_BYTES}")
    values = np.frombuffer(payload, dtype=_BE_INT32, count=K, offset=HEADER_BYTES)
    return wire.unpack_agg(payload), values.astype(np.int32)


def values_of(payload: bytes | bytearray | memoryview) -> np.ndarray:
    """The K lanes of a payload as a read-only big-endian int32 view (no copy)."""
    return np.frombuffer(payload, dtype=_BE_INT32, count=K, offset=HEADER_BYTES)
