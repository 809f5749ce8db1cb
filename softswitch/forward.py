"""Forwarding of non-aggregation traffic (p4src/include/forward.p4).

IPv4 (IHL 5) goes by longest prefix with a TTL decrement and a new destination
MAC; IP options are dropped, as in the P4.  Everything else that is not IPv4
(ARP above all) goes by destination MAC, flooding through a multicast group
whose replica back out of the ingress port egress prunes (`flood_prune`).

Why the results are plain tuples: the pipeline's per-packet loop unpacks
(frame, egress_spec, mcast_grp, kind) without building objects.
"""

from __future__ import annotations

from agglab.softswitch.tables import KeySpec, Table

# kinds of forwarding decisions, shared with aggregate.py and pipeline.py; COPY: a scheme's
# multicast to hosts, each replica addressed by copy_dst (its rid) in egress
NORMAL, RESULT, FLOOD, COPY = 0, 1, 2, 3

_DROP = "drop"


class Forward:
    def __init__(self):
        self.ipv4_lpm = Table("ipv4_lpm", [KeySpec("hdr.ipv4.dstAddr", "lpm", 32)],
                              {"ipv4_forward": [("dmac", 48), ("port", 9)], _DROP: []},
                              default=_DROP, size=1024)
        self.l2_exact = Table("l2_exact", [KeySpec("hdr.ethernet.dstAddr", "exact", 48)],
                              {"l2_forward": [("port", 9)], "l2_flood": [("mgrp", 16)], _DROP: []},
                              default=_DROP, size=1024)
        self.copy_dst = Table("copy_dst", [KeySpec("standard_metadata.egress_rid", "exact", 16)],
                              {"copy_set_dst": [("dmac", 48), ("dip", 32)], _DROP: []}, default=_DROP, size=1024)
        self._mac_bytes: dict[int, bytes] = {}

    def ipv4(self, frame: bytes):
        """ipv4_lpm for an IPv4 frame; None = drop."""
        if frame[14] & 0x0F != 5:
            return None                        # IP options: see forward.p4
        action, params = self.ipv4_lpm.lookup((int.from_bytes(frame[30:34], "big"),))
        if action != "ipv4_forward":
            return None
        dmac, port = params
        mac = self._mac_bytes.get(dmac)
        if mac is None:
            mac = self._mac_bytes[dmac] = dmac.to_bytes(6, "big")
        buf = bytearray(frame)
        buf[0:6] = mac
        buf[22] = (buf[22] - 1) & 0xFF         # TTL; the deparser fixes the checksum
        return buf, port, 0, NORMAL

    def l2(self, frame: bytes):
        """l2_exact for a non-IPv4 frame; None = drop."""
        action, params = self.l2_exact.exact.get((int.from_bytes(frame[0:6], "big"),),
                                                 self.l2_exact.default)
        if action == "l2_forward":
            return frame, params[0], 0, NORMAL
        if action == "l2_flood":
            return frame, 0, params[0], FLOOD
        return None


    def copy(self, rid: int, buf: bytes | bytearray) -> bytearray | None:
        """CopyDst (forward.p4) for one replica: the addresses of the host its rid names; None =
        drop (no entry). The caller recomputes the IPv4 checksum."""
        action, params = self.copy_dst.exact.get((rid,), self.copy_dst.default)
        if action != "copy_set_dst":
            return None
        dmac, dip = params
        out = bytearray(buf)
        out[0:6] = dmac.to_bytes(6, "big")
        out[30:34] = dip.to_bytes(4, "big")
        return out


def flood_prune(kind: int, egress_port: int, ingress_port: int) -> bool:
    """FloodPrune: True when a flooded replica would go back out of its ingress port."""
    return kind == FLOOD and egress_port == ingress_port
