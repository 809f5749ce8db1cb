"""The scapy layer and the fast data-path helpers must describe the same bytes.

Why: agents send with `encode`/`HeaderPacker` while tests, pcaps and people
read packets through scapy; if the two disagreed, every trace would lie.
"""

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

from agglab.ground import wire
from agglab.hosts.protocol import HeaderPacker, K, decode, encode, values_of
from agglab.hosts.scapy_layer import Agg

headers = st.fixed_dictionaries(
    {name: st.integers(0, (1 << bits) - 1) for name, bits in wire.AGG_FIELDS})
lanes = st.lists(st.integers(-2**31, 2**31 - 1), min_size=K, max_size=K)


@settings(max_examples=200, deadline=None)
@given(headers, lanes)
def test_scapy_bytes_equal_encode(fields, values):
    vals = np.array(values, dtype=np.int32)
    assert bytes(Agg(**fields, values=values)) == encode(fields, vals)
    assert HeaderPacker(**fields).pack() == encode(fields, vals)[:wire.AGG_HEADER_BYTES]


@settings(max_examples=100, deadline=None)
@given(headers, lanes)
def test_decode_inverts_encode_and_scapy_agrees(fields, values):
    payload = encode(fields, np.array(values, dtype=np.int32))
    got_fields, got_values = decode(payload)
    assert got_fields == fields
    assert got_values.dtype == np.int32 and got_values.tolist() == values
    assert values_of(payload).tolist() == values
    pkt = Agg(payload)
    assert {name: getattr(pkt, name) for name in wire.FIELD_NAMES} == fields
    assert pkt.values == values


@settings(max_examples=50, deadline=None)
@given(headers, headers)
def test_header_packer_splits_fixed_and_varying(fixed, varying):
    names = list(wire.FIELD_NAMES)
    fixed = {n: fixed[n] for n in names[: len(names) // 2]}
    varying = {n: varying[n] for n in names[len(names) // 2:]}
    assert HeaderPacker(**fixed).pack(**varying) == wire.pack_agg(**fixed, **varying)


@settings(max_examples=50, deadline=None)
@given(headers, headers, st.randoms(use_true_random=False))
def test_compiled_packer_takes_any_fields_positionally(fixed, varying, rnd):
    """The generated packer the agents use per packet writes what wire.pack_agg writes."""
    names = list(wire.FIELD_NAMES)
    rnd.shuffle(names)
    cut = rnd.randrange(len(names) + 1)
    fixed = {n: fixed[n] for n in names[:cut]}
    varying = {n: varying[n] for n in names[cut:]}
    pack = HeaderPacker(**fixed).compile(*varying)
    assert pack(*varying.values()) == wire.pack_agg(**fixed, **varying)


def test_full_frame_has_agg_header_at_wire_offset():
    fields = dict(job=3, tree=1, epoch=2, flags=wire.FLAG_RETX, ver=1, slot=777, worker=5,
                  exp=130, block=123456, next_block=wire.NEXT_NONE)
    values = np.arange(-K // 2, K // 2, dtype=np.int32) * 1000003
    frame = bytes(Ether() / IP(src="10.0.0.1", dst="10.255.255.254") / UDP() / Agg(**fields, values=values.tolist()))
    assert len(frame) == wire.FRAME_BYTES
    assert frame[wire.AGG_OFFSET:] == encode(fields, values)
    dissected = Ether(frame)
    assert dissected[UDP].sport == dissected[UDP].dport == wire.UDP_PORT
    assert dissected[Agg].slot == 777 and dissected[Agg].values == values.tolist()


def test_dissects_on_either_port():
    payload = encode({"slot": 9}, np.zeros(K, np.int32))
    for sport, dport in ((wire.UDP_PORT, 1234), (1234, wire.UDP_PORT)):
        pkt = Ether(bytes(Ether() / IP() / UDP(sport=sport, dport=dport) / payload))
        assert pkt.haslayer(Agg) and pkt[Agg].slot == 9


def test_encode_rejects_wrong_shapes_and_dtypes():
    with pytest.raises(ValueError, match=rf"exactly K={K} values, got shape \({K - 1},\)"):
        encode({}, np.zeros(K - 1, np.int32))
    with pytest.raises(TypeError, match="values must be int32 .* got float32"):
        encode({}, np.zeros(K, np.float32))
    with pytest.raises(ValueError, match=f"payload has {wire.PAYLOAD_BYTES - 1} bytes, need {wire.PAYLOAD_BYTES}"):
        decode(b"\0" * (wire.PAYLOAD_BYTES - 1))
