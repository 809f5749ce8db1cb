"""Parser: classify a frame the way p4src/include/parser.p4 extracts it.

Why a classification instead of header objects: every header the pipeline
uses sits at a fixed offset (IHL 5 only, as in the P4 parser), so the later
stages read fields straight from the frame with struct at known offsets and
no per-packet objects are built.  The length checks reproduce BMv2's
PacketTooShort error: an extract that runs past the end of the frame stops
the parser and leaves parser_error set, which ingress turns into a drop.
"""

from __future__ import annotations

from agglab.ground import wire

UDP_PORT_HI, UDP_PORT_LO = wire.UDP_PORT >> 8, wire.UDP_PORT & 0xFF
IPV4_END = wire.ETH_BYTES + wire.IPV4_BYTES          # 34
UDP_END = IPV4_END + wire.UDP_BYTES                   # 42
AGG_END = wire.AGG_OFFSET + wire.AGG_HEADER_BYTES     # agg_h extracted
DATA_END = wire.FRAME_BYTES                           # agg_data_h extracted
FLAGS_OFF = wire.AGG_OFFSET + 3
ACK_ONLY = wire.CONST["AGG_FLAG_ACK"] | wire.CONST["AGG_FLAG_SPARSE"]

# What the parser accepted (parser.p4 states that ended in `accept`)
L2 = 0        # ethernet only (ARP, IPv6, ...)
IPV4 = 1      # ethernet + ipv4, nothing further (IHL != 5, not UDP, not agg port)
AGG = 2       # ethernet + ipv4 + udp + agg + data (a sparse ACK: agg only)
ERROR = 3     # an extract ran past the end of the frame: parser_error != NoError


def parse(frame: bytes) -> int:
    """One of L2, IPV4, AGG, ERROR for `frame` (see parser.p4 for the states)."""
    n = len(frame)
    if n < wire.ETH_BYTES:
        return ERROR
    if frame[12] != 0x08 or frame[13] != 0x00:
        return L2
    if n < IPV4_END:
        return ERROR
    if frame[14] & 0x0F != 5 or frame[23] != 17:
        return IPV4
    if n < UDP_END:
        return ERROR
    if frame[36] != UDP_PORT_HI or frame[37] != UDP_PORT_LO:
        return IPV4
    if n < DATA_END:
        # parse_agg: a sparse acknowledgement (SPARSE and ACK) is header only
        return AGG if n >= AGG_END and frame[FLAGS_OFF] & ACK_ONLY == ACK_ONLY else ERROR
    return AGG
