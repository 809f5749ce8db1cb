"""ATP's 64-bit sender set in agg_h, read and written alike by the twin, the hosts and tests.

Why: ATP (p4src/include/atp.p4) carries the set of ranks a packet's values stand for, one
bit per rank. next_block alone is 32 bits, so a job had at most 32 workers and two jobs
covered half of a k=8 fat-tree. ATP packets leave the dense fields tree, epoch, ver and slot
unused (they take atp.p4's own-table branch before any agg_job lookup), so those 32 bits
are the set's high word (atp.p4's ATP_SENDERS_HI = tree ++ epoch ++ ver ++ slot) and the
header keeps its layout: every other scheme's packet, and every ATP packet of ranks < 32,
is byte for byte what it was.
"""

from __future__ import annotations

from agglab.ground import wire

MAX_WORKERS: int = wire.CONST["ATP_MAX_WORKERS"]
_TREE, _EPOCH, _SLOT = wire.AGG_OFFSET + 1, wire.AGG_OFFSET + 2, wire.AGG_OFFSET + 4   # slot's two bytes hold ver too
_NEXT = wire.AGG_OFFSET + 12
assert wire.FIELD_NAMES[1:3] == ("tree", "epoch") and wire.FIELD_NAMES[4:6] == ("ver", "slot")
assert wire.FIELD_NAMES[9] == "next_block" and MAX_WORKERS == 64


def fields(senders: int) -> dict[str, int]:
    """The agg_h fields (for wire.pack_agg / protocol.encode) that carry `senders`."""
    if senders >> MAX_WORKERS:
        raise ValueError(f"an ATP sender set holds {MAX_WORKERS} ranks, got bit {senders.bit_length() - 1}")
    hi = senders >> 32
    return {"next_block": senders & 0xFFFFFFFF, "tree": hi >> 24, "epoch": hi >> 16 & 0xFF,
            "ver": hi >> 15 & 1, "slot": hi & 0x7FFF}


def of_header(hdr: dict) -> int:
    """The sender set of a decoded agg_h (a dict of its fields)."""
    hi = hdr["tree"] << 24 | hdr["epoch"] << 16 | hdr["ver"] << 15 | hdr["slot"]
    return hi << 32 | hdr["next_block"]


def of_frame(frame: bytes) -> int:
    """The sender set of a whole frame (the twin's reading of ATP_SENDERS_HI ++ next_block)."""
    hi = frame[_TREE] << 24 | frame[_EPOCH] << 16 | frame[_SLOT] << 8 | frame[_SLOT + 1]
    return hi << 32 | int.from_bytes(frame[_NEXT:_NEXT + 4], "big")


def write_frame(buf: bytearray, senders: int) -> None:
    """Write `senders` into a frame in place (atp.p4's completion: the set leaves with the sum)."""
    hi = senders >> 32
    buf[_TREE], buf[_EPOCH] = hi >> 24 & 0xFF, hi >> 16 & 0xFF
    buf[_SLOT:_SLOT + 2] = (hi & 0xFFFF).to_bytes(2, "big")
    buf[_NEXT:_NEXT + 4] = (senders & 0xFFFFFFFF).to_bytes(4, "big")
