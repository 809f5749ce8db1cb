"""Deparser side: the IPv4 header checksum, as AgglabComputeChecksum does it.

Why recompute from scratch rather than patch incrementally: BMv2's
update_checksum recomputes over the 20-byte header whatever the incoming
checksum was, so a frame that arrived with a wrong checksum leaves with a
correct one; an incremental update would preserve the error and the bytes
would differ.  Nine 16-bit words and a fold cost well under a microsecond.

The headers themselves need no emitting: the pipeline edits the frame bytes
in place, and fields it does not touch stay byte-identical, as they do in BMv2
(which re-emits exactly the extracted headers followed by the payload).
"""

from __future__ import annotations

import struct

from agglab.ground import wire

IP = wire.ETH_BYTES
CSUM_OFFSET = IP + 10
_WORDS = struct.Struct("!5H2x4H")      # the ten header words minus the checksum
_CSUM = struct.Struct("!H")


def ipv4_checksum(buf: bytes | bytearray, extra: int = 0) -> int:
    """Checksum of the IPv4 header at offset 14, ignoring the stored checksum.

    `extra` is a pre-summed contribution of words the caller will overwrite
    (see aggregate.Reply): then those words must be zero in `buf`.
    """
    s = sum(_WORDS.unpack_from(buf, IP)) + extra
    s = (s & 0xFFFF) + (s >> 16)
    s = (s & 0xFFFF) + (s >> 16)
    return ~s & 0xFFFF


def update_ipv4_checksum(buf: bytearray) -> None:
    """Store the recomputed checksum (the frame must carry a 20-byte IPv4 header)."""
    _CSUM.pack_into(buf, CSUM_OFFSET, ipv4_checksum(buf))
