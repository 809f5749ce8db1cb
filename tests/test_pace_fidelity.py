"""A PACE replay is judged by how busy its transfers' frames kept the link
(agglab.emulation.pace_fidelity), not by their payload over the link rate."""

from __future__ import annotations

import pytest

from agglab.emulation import pace_fidelity
from agglab.emulation.pace_run import per_scheduler
from agglab.ground.runspec import RunSpec

# A dense int32 frame: Ethernet+IPv4+UDP (42) + the aggregation header (16) + 64 x 4 bytes of data.
FRAME_BITS = 314 * 8


def spec(bw: float = 0.9) -> RunSpec:
    return RunSpec(workers=4, topology="single", algorithm="switchml", dtype="int32", window=16,
                   elements=1024, bw=bw).validate()


def test_a_transfer_costs_its_whole_blocks_and_its_lead_frame_on_the_wire():
    wire = pace_fidelity.TransferWire(spec(0.9))
    # 357 elements: 6 blocks (the last one part-filled) and one int32 lead frame
    assert wire(357) == pytest.approx(7 * FRAME_BITS / 0.9e6)
    assert wire(64) == pytest.approx(2 * FRAME_BITS / 0.9e6)


def test_small_chunks_that_keep_the_link_busy_are_link_bound_though_their_payload_is_64_percent():
    """The BMv2 suite's VGG-16 at 0.9 Mb/s (2026-12-06): chunks of ~357 elements, each call as
    long as its frames' wire time. The payload reaches 0.65 of the link, under the 70% the
    old rule asked for; the link was busy throughout."""
    wire = pace_fidelity.TransferWire(spec(0.9))
    took = 7 * FRAME_BITS / 0.9e6                           # each call: exactly its frames' time
    spans = [(i * 0.05, i * 0.05 + took) for i in range(140)]   # compute gaps between calls
    share = pace_fidelity.busy_share([wire(357)] * 140, spans)
    assert share == pytest.approx(1.0)
    assert pace_fidelity.link_bound([share])
    payload = 140 * 357 * 32 / sum(e - s for s, e in spans) / 1e6
    assert payload / 0.9 < 0.7


def test_transfers_slower_than_their_frames_are_not_link_bound():
    wire = pace_fidelity.TransferWire(spec(1.4))
    need = wire(4096)                                    # 64 blocks + the lead frame
    assert need == pytest.approx(65 * FRAME_BITS / 1.4e6)
    slow = pace_fidelity.busy_share([need] * 4, [(0, need / 0.85)] * 4)
    assert slow == pytest.approx(0.85)
    assert not pace_fidelity.link_bound([1.0, slow])     # one worker's slow transfers flag the run
    assert not pace_fidelity.link_bound([])


def test_per_scheduler_reports_the_busy_share_and_flags_below_the_mark():
    base = {"ok": True, "bw_mbps": 0.9, "emulated_goodput_mbps": 0.576, "iteration_ms": {"fifo": 120.0, "pace": 110.0},
            "model_iteration_ms": {"fifo": 100.0, "pace": 90.0}, "scale": 10.0, "shrink": 2.0}
    ok = per_scheduler({**base, "transfers_busy": 0.998, "link_bound": True})["pace"]["fidelity"]
    assert not ok["cpu_bound"] and ok["link"]["utilisation"] == 0.998 and ok["link"]["goodput_mbps"] == 0.576
    assert ok["link"]["achieved_mbps"] == pytest.approx(0.898, abs=1e-3)
    assert "100% busy" in ok["reason"] and ">= 90%" in ok["reason"]
    slow = per_scheduler({**base, "transfers_busy": 0.8, "link_bound": False})["fifo"]["fidelity"]
    assert slow["cpu_bound"] and "80% busy" in slow["reason"]
