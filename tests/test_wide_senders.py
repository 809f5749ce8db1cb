"""ATP's 64-bit sender set (ground/wide_senders.py): where each rank's bit travels in agg_h.

The expected field values are written out by hand from atp.p4's ATP_SENDERS_HI
(tree ++ epoch ++ ver ++ slot above next_block), not computed with the module.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from agglab.controller.schemes.atp import AtpJob
from agglab.ground import wide_senders, wire
from agglab.hosts.protocol import decode, encode

CASES = [   # (sender set, the agg_h fields that carry it)
    (1 << 1, {"next_block": 2, "tree": 0, "epoch": 0, "ver": 0, "slot": 0}),
    (1 << 31, {"next_block": 0x80000000, "tree": 0, "epoch": 0, "ver": 0, "slot": 0}),
    (1 << 32, {"next_block": 0, "tree": 0, "epoch": 0, "ver": 0, "slot": 1}),
    (1 << 40, {"next_block": 0, "tree": 0, "epoch": 0, "ver": 0, "slot": 256}),
    (1 << 47, {"next_block": 0, "tree": 0, "epoch": 0, "ver": 1, "slot": 0}),
    (1 << 50, {"next_block": 0, "tree": 0, "epoch": 4, "ver": 0, "slot": 0}),
    (1 << 63 | 3, {"next_block": 3, "tree": 128, "epoch": 0, "ver": 0, "slot": 0}),
    ((1 << 64) - 2, {"next_block": 0xFFFFFFFE, "tree": 255, "epoch": 255, "ver": 1, "slot": 0x7FFF}),
]


@pytest.mark.parametrize("senders, want", CASES, ids=[hex(s) for s, _ in CASES])
def test_each_rank_travels_in_its_field_and_reads_back(senders, want):
    assert wide_senders.fields(senders) == want
    payload = encode({"job": 3, "flags": 32, "block": 9, "worker": 7, **want}, np.zeros(wire.K, dtype=np.int32))
    hdr, _ = decode(payload)
    assert wide_senders.of_header(hdr) == senders
    frame = bytes(wire.AGG_OFFSET) + payload
    assert wide_senders.of_frame(frame) == senders
    buf = bytearray(bytes(wire.AGG_OFFSET) + encode({"job": 3, "flags": 32, "block": 9, "worker": 7},
                                                       np.zeros(wire.K, dtype=np.int32)))
    wide_senders.write_frame(buf, senders)
    assert bytes(buf) == frame                   # job, flags, block and worker untouched


def test_a_rank_past_63_is_refused():
    with pytest.raises(ValueError, match="holds 64 ranks, got bit 64"):
        wide_senders.fields(1 << 64)


def test_a_job_of_65_workers_is_refused_and_names_the_width(tmp_path: Path):
    with pytest.raises(ValueError, match=r"sender set is 64 bits \(ATP_MAX_WORKERS\), got 65 workers"):
        AtpJob(None, {}, [f"h{i}" for i in range(65)], 4, tmp_path / "epoch.json")
