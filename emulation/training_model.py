"""A training job's time on this network: its compute, and allreduces that are limited by the
links' bytes or by the window's round trips, whichever is slower.

Why: the wire model (emulation/wire_model.py) is a fluid bytes model; it says what the links
allow when every worker keeps them busy. A job whose window is short of the path's
bandwidth-delay product cannot: with W frames out per worker and a round trip of RTT, a worker
gets W frames per RTT through, and the call takes frames / W x RTT however fast the links
are. That is exactly where ATP's shared pool gains over static partitions (NSDI'21): a
static partition of P/J slots caps a job's window at P/J, while an ATP aggregator is held
only from a block's first packet to its last at that switch (softswitch/schemes/atp.py
releases it when the sum leaves), so ATP's window is not the pool's size. And between the
allreduces a job computes (`--iterations`, `--compute-ms` / `--compute-profile`,
emulation/training_jobs.py), which no link bound touches: the ratio of two jobs' training
times is diluted by it.

The round trip is the run's own (`rtt_min_ms` of a run's jobs, hosts/checker.py: each
rank's least latency sample, the median over ranks): on this emulator a round trip is
the switches' and hosts' turnaround (coalescing waits, Python per frame) far more than
the links' serialization, which a window-limited link's full htb bucket mostly hides; no
formula of the link rates gives it. The least sample is a block that waited for no
straggler, so the window term is the best a window can do: a lower bound on the call.
Only ATP's workers record it: they time a block from the moment they send it. The dense
agent times a slot from its pacer's booked departure (hosts/agent.py `send_round`), up to
half a link bucket ahead, so its least sample is no round trip (measured at 2.5 Mb/s:
-14 to +0.05 ms) and it records none; a point without a round trip counts bytes and
compute only (`measured_rtt` also drops a value at or below 0).

    call     = max(wire_seconds, frames / window x rtt)
    training = iterations x (compute + call)

`frames`: what one worker sends per call (SwitchML: its K-blocks and lead frames,
wire_model.frames; ATP: one frame per K-block); `window`: the spec's (RunSpec.default_window:
a partitioned scheme's at most its P/J slots, ATP's the asked maximum). A job's offset
(`--job-offsets`) is not in it: a job's clock starts after its offset (hosts/iterations.py).
"""

from __future__ import annotations

import networkx as nx

from agglab.emulation.training_jobs import resolve_compute
from agglab.emulation.wire_model import frames, wire_seconds
from agglab.ground import wire
from agglab.ground.runspec import RunSpec


def worker_frames(spec: RunSpec) -> int:
    """Aggregation frames one worker sends per call: ATP one per K-block (int32: no lead
    frames), the dense pipeline its K-blocks and lead frames."""
    if spec.shares_pool:
        return -(-spec.elements // wire.K)
    return frames(spec)


def window_seconds(nframes: int, window: int, rtt_s: float) -> float:
    """A call's time when its window decides: `window` frames per round trip."""
    return nframes / window * rtt_s


def call_seconds(spec: RunSpec, rtt_s: float | None, g: nx.Graph | None = None) -> float:
    """One allreduce: the wire time, or the window's round trips if those take longer
    (rtt_s None: no round trip known, the wire time alone)."""
    links = wire_seconds(spec, g)
    if not rtt_s or rtt_s <= 0:
        return links
    return max(links, window_seconds(worker_frames(spec), spec.default_window(), rtt_s))


def training_seconds(spec: RunSpec, rtt_s: float | None, g: nx.Graph | None = None) -> float:
    """A job's training time: `iterations` x (its compute + one call)."""
    spec = resolve_compute(spec)
    return spec.iterations * ((spec.compute_ms or 0.0) / 1e3 + call_seconds(spec, rtt_s, g))
