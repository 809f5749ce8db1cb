"""Was a PACE replay link-bound? Its transfers' frames against the time they took.

Why not the fidelity probe: a PACE iteration sleeps for its compute between transfers, so
the probe's link utilisation over the run means nothing; the transfers are judged on their
own (compute gaps excluded): each worker's calls together should have kept its link busy.

Why frames, not payload: a transfer of n elements puts whole K-blocks on the wire, each in
a frame with its headers (ground/wire.py: 314 bytes for 256 of data), plus its call's lead
frame. The rule this replaces asked the payload to reach 70% of the link rate, a proxy that
holds for large fused transfers (payload 81% of the wire) and fails for PACE's small chunks
at a low rate: the BMv2 suite at 0.9 Mb/s (2026-12-06) planned VGG-16 as 140 transfers of
357 elements (median: 5.6 blocks), whose payload is 64% of their frames, so the rule
flagged every VGG-16 and BERT-base run CPU-bound although their frames kept the link
99.4-102.8% busy (all 24 replays of that suite and of the twin's at 5 Mb/s, rebuilt from
their traces). Here the wire time of each transfer is the run's own wire model
(emulation/wire_model.py, every scheme and topology) with ideal links: the hosts pace their
sends at the link rate, so an idle link's htb bucket does not speed a chunk up.

The mark is the probe's (fidelity.BUSY_MIN): a replay whose frames kept the link at least
that busy measured the network; below it the transfers waited on something else (the
emulator's CPU, retransmissions) and the run is flagged, as before.
"""

from __future__ import annotations

from agglab.controller import topologies
from agglab.emulation.fidelity import BUSY_MIN
from agglab.emulation.wire_model import BoundError, wire_seconds
from agglab.ground.runspec import RunSpec


class TransferWire:
    """Wire seconds of one call of n elements on `spec`'s network (cached per size: a plan
    repeats its chunk sizes)."""

    def __init__(self, spec: RunSpec):
        self.spec = spec
        self.graph = topologies.for_run(spec)
        self.graph.graph["buckets"] = False      # paced hosts: no burst from an idle bucket
        self.cache: dict[int, float] = {}

    def __call__(self, elements: int) -> float:
        if elements not in self.cache:
            one = self.spec.with_(elements=elements)
            try:
                self.cache[elements] = wire_seconds(one, self.graph)
            except BoundError:                   # a failure picked at run time: the intact network's
                self.cache[elements] = wire_seconds(one.with_(fail=[]), self.graph)
        return self.cache[elements]


def busy_share(wire_s: list[float], spans: list[tuple[float, float]]) -> float:
    """How busy one worker's transfers kept the link: their wire time over their time."""
    took = sum(end - start for start, end in spans)
    return sum(wire_s) / took if took > 0 else 0.0


def link_bound(shares: list[float]) -> bool:
    """Every worker's transfers of every plan kept the link at least BUSY_MIN busy."""
    return bool(shares) and min(shares) >= BUSY_MIN
