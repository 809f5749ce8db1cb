"""The packet layout the agents and the software switch share (ground/wire.py, read from
headers.p4) against the one docs/design/ writes down (agglab/testkit/layout.py, by hand).

Why: the conformance vectors' expected frames are built by agglab/testkit/frames.py with
layout.py; if they used agglab.ground.wire, a wrong layout there would be shared by packer, switch and
expectation. These tests keep the oracle independent and hold agglab.ground.wire to it.
"""

from __future__ import annotations

import ast
from pathlib import Path

from hypothesis import given, strategies as st

from agglab.testkit import frames, layout
from agglab.ground import wire

TESTKIT = Path(layout.__file__).parent


def _imports(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            found |= {node.module} | {f"{node.module}.{a.name}" for a in node.names}
    return found


def test_the_oracle_and_the_frame_builder_do_not_import_ground_wire():
    for name in ("layout.py", "frames.py"):
        assert not any(i == "agglab.ground.wire" or i.startswith("agglab.ground.wire") for i in _imports(TESTKIT / name)), name


def test_a_header_by_hand():
    """job 1, tree 2, epoch 3, flags 4, ver 1, slot 5, worker 6, exp 7, block 8, next_block 9:
    the bytes as the design's field list puts them, ver in the top bit of the slot word."""
    expected = bytes.fromhex("01 02 03 04 8005 06 07 00000008 00000009")
    fields = dict(job=1, tree=2, epoch=3, flags=4, ver=1, slot=5, worker=6, exp=7, block=8, next_block=9)
    assert layout.pack_agg(**fields) == expected
    assert wire.pack_agg(**fields) == expected


def test_geometry_agrees():
    assert layout.K == wire.K and layout.UDP_PORT == wire.UDP_PORT
    assert layout.AGG_OFFSET == wire.AGG_OFFSET == 42 and layout.AGG_H_BYTES == wire.AGG_HEADER_BYTES == 16
    assert layout.frame_bytes() == wire.FRAME_BYTES
    assert layout.frame_bytes(64) == 314 and layout.frame_bytes(256) == 1082     # the design's figures


_FIELDS = st.fixed_dictionaries({"job": st.integers(0, 255), "tree": st.integers(0, 255),
                                 "epoch": st.integers(0, 255), "flags": st.integers(0, 255),
                                 "ver": st.integers(0, 1), "slot": st.integers(0, 0x7FFF),
                                 "worker": st.integers(0, 255), "exp": st.integers(0, 255),
                                 "block": st.integers(0, 2**32 - 1), "next_block": st.integers(0, 2**32 - 1)})


@given(_FIELDS)
def test_ground_wire_packs_and_reads_as_the_design_says(fields):
    packed = layout.pack_agg(**fields)
    assert wire.pack_agg(**fields) == packed
    assert wire.unpack_agg(packed) == fields == layout.unpack_agg(packed, 0)


@given(_FIELDS, st.lists(st.integers(-2**31, 2**31 - 1), min_size=1, max_size=8))
def test_a_whole_frame_from_the_builder_matches_the_agents_codec(fields, values):
    """A vector's worker frame, built from the design's layout, read back by agglab.ground.wire."""
    frame = frames.build({"from": "h1", "agg": fields, "values": values})
    assert len(frame) == layout.frame_bytes() == wire.FRAME_BYTES
    assert wire.unpack_agg(frame, wire.AGG_OFFSET) == fields
    assert frame[34:36] == frame[36:38] == layout.UDP_PORT.to_bytes(2, "big")
