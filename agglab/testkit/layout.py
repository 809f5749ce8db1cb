"""The aggregation packet's byte layout, written from docs/design/wire-format.md ("Wire format") by hand.

Why a second packer: the agents and the software switch both take their layout from
ground/wire.py (which reads p4src/include/headers.p4). If the conformance vectors' expected
frames were packed by agglab.ground.wire too, a wrong layout there would be shared by the packer, the
switch and the expectation, and no vector could see it on the software switch (the only target
CI has). So the vectors' frames are built here, from the layout as the design document states
it, with struct and no import of agglab.ground.wire; tests/test_wire_oracle.py holds agglab.ground.wire to it.

    Ethernet (14) / IPv4, IHL 5 (20) / UDP, both ports AGG_UDP_PORT (8) / agg_h (16) / agg_data_h
    agg_h, in order: job:8 tree:8 epoch:8 flags:8 ver:1 slot:15 worker:8 exp:8 block:32 next_block:32
    agg_data_h: K big-endian int32 (K = 64, or 256 in the wide variant: AGGLAB_K)
"""

from __future__ import annotations

import os
import struct

UDP_PORT = 48879                     # AGG_UDP_PORT (0xBEEF), docs/design/wire-format.md "Wire format"
K = int(os.environ.get("AGGLAB_K", "").strip() or 64)
ETH_BYTES, IPV4_BYTES, UDP_BYTES, AGG_H_BYTES = 14, 20, 8, 16
AGG_OFFSET = ETH_BYTES + IPV4_BYTES + UDP_BYTES          # where agg_h starts in a frame
FIELDS = ("job", "tree", "epoch", "flags", "ver", "slot", "worker", "exp", "block", "next_block")
_AGG_H = struct.Struct("!BBBBHBBII")                     # ver:1 and slot:15 share one 16-bit word


def pack_agg(job=0, tree=0, epoch=0, flags=0, ver=0, slot=0, worker=0, exp=0, block=0, next_block=0) -> bytes:
    """agg_h's 16 bytes; every field must fit its width (a vector that overflows one is wrong)."""
    widths = {"job": 8, "tree": 8, "epoch": 8, "flags": 8, "ver": 1, "slot": 15, "worker": 8, "exp": 8,
              "block": 32, "next_block": 32}
    given = dict(job=job, tree=tree, epoch=epoch, flags=flags, ver=ver, slot=slot, worker=worker, exp=exp,
                 block=block, next_block=next_block)
    for name, value in given.items():
        if not 0 <= value < 1 << widths[name]:
            raise ValueError(f"agg_h.{name}={value} does not fit {widths[name]} bits")
    return _AGG_H.pack(job, tree, epoch, flags, (ver << 15) | slot, worker, exp, block, next_block)


def unpack_agg(frame: bytes, offset: int = AGG_OFFSET) -> dict[str, int]:
    job, tree, epoch, flags, ver_slot, worker, exp, block, next_block = _AGG_H.unpack_from(frame, offset)
    return {"job": job, "tree": tree, "epoch": epoch, "flags": flags, "ver": ver_slot >> 15,
            "slot": ver_slot & 0x7FFF, "worker": worker, "exp": exp, "block": block, "next_block": next_block}


def frame_bytes(k: int = K) -> int:
    """A full aggregation frame: 58 bytes of headers and 4 per value (314 at K=64, 1082 at 256)."""
    return AGG_OFFSET + AGG_H_BYTES + 4 * k
