"""The aggregation packet as a scapy layer, for tests, pcaps, fuzzing and debugging.

Generated from agglab.ground.wire (which reads the P4 header), like hosts/protocol.py's fast
helpers; tests/test_hosts_protocol.py proves both produce the same bytes. Importing this
module binds the layer to the aggregation UDP port, so scapy dissects captures with it.
"""

from __future__ import annotations

from scapy.fields import BitField, FieldListField, SignedIntField
from scapy.layers.inet import UDP
from scapy.packet import Packet, bind_bottom_up, bind_top_down

from agglab.ground import wire

K = wire.K


class Agg(Packet):
    """agg_h (one BitField per P4 field, same names) followed by K signed int32 lanes."""

    name = "Agg"
    fields_desc = [BitField(name, 0, bits) for name, bits in wire.AGG_FIELDS] + [
        # max_count: scapy refuses lists longer than conf.max_list_count (100) unless the
        # field names its own bound, and the wide variant carries 256 lanes
        FieldListField("values", [0] * K, SignedIntField("v", 0), count_from=lambda pkt: K, max_count=K),
    ]

    def mysummary(self) -> str:
        return self.sprintf("Agg job=%job% slot=%slot% ver=%ver% block=%block% exp=%exp% flags=%flags%")


# Dissect when either UDP port is the aggregation port; build with both ports set.
bind_bottom_up(UDP, Agg, dport=wire.UDP_PORT)
bind_bottom_up(UDP, Agg, sport=wire.UDP_PORT)
bind_top_down(UDP, Agg, sport=wire.UDP_PORT, dport=wire.UDP_PORT)
