"""Retransmission timeout for the agent's per-slot timers.

Which latencies the agent samples (hosts/slots.py, `sample_rtt`), and why it
differs from TCP's Karn rule: a slot completes when the *slowest* worker's
packet arrives, so the useful "RTT" is the completion latency since our first
send, stragglers included; excluding retransmitted slots, as Karn does, hides
exactly the slow cases and keeps the RTO too short (a retransmission storm).
The switch echoes the completing packet's worker and flags, so a result
completed by a retransmission (anyone's) is not sampled, since it includes
loss recovery and would feed back into ever longer timeouts, except when it
answers our own single retransmission, which is timed from that
retransmission.  RtoEstimator turns the samples into a timeout.
"""

from __future__ import annotations

from agglab.ground.wire import FRAME_BYTES

MIN_RTO = 0.002          # below this, timer granularity and scheduling noise dominate
# Cap of the estimate and of the per-slot backoff. Under random loss the completion
# latencies include other workers' recovery and push the estimate to the cap, so the cap
# sets the loss-recovery pace; too low and a CPU-bound switch sees spurious resends.
# Measured (8 workers x 1M int32, one software switch): cap 1.0 s: 87 s at 5% loss;
# 0.2 s: 21 s at 5% loss but 3,737 spurious resends and 2x slower without loss;
# 0.3 s: 32 s at 5% loss, 4.6 s and 307 resends without loss.
MAX_RTO = 0.3
PEAK_HALF_LIFE = 0.5     # seconds for the latency peak hold to decay by half
BACKOFF_CAP = 4          # a slot's timeout grows at most to 4 x RTO on repeated losses


def queue_seconds(frames: int, mbps: float) -> float:
    """How long `frames` full agg frames take through a link of `mbps` Mb/s: the queue a
    window makes at a path's slowest link, which every scheme's timers are floored at
    (RtoEstimator.set_floor says why)."""
    return frames * FRAME_BYTES * 8 / (mbps * 1e6)


def backoff(rto: float, tries: int) -> float:
    """Timeout of a slot after `tries` sends. Capped low on purpose: the drop simulator's
    loss is random, not congestion, so a long exponential backoff only idles the slot
    (measured: 8 workers x 1M int32 at 5% loss took 87 s with 2^tries up to 1 s). An RTO
    already above the cap (a slow path's floor, RtoEstimator.set_floor) is not backed off:
    it already outlasts the path's full queue."""
    return min(max(MAX_RTO, rto), rto * min(2 ** tries, BACKOFF_CAP))


class RtoEstimator:
    """RFC 6298 estimator plus a peak hold on the completion latency.

    Why the peak hold: a slot completes when the slowest worker's packet
    arrives, so latency samples are bimodal (the last worker sees ~0, the others
    wait for it) and stragglers come in bursts; SRTT + 4 RTTVAR then fires on
    every straggler episode, for the whole window at once.  The RTO is kept
    above 1.25 x the largest recent sample, which decays with a half-life of
    PEAK_HALF_LIFE seconds so one long stall does not slow loss recovery forever.
    """

    def __init__(self, initial: float) -> None:
        self.srtt: float | None = None
        self.least: float | None = None    # the smallest sample: the path's own round trip
        self.rttvar = self.peak = self.peak_at = 0.0
        self.floor, self.cap = MIN_RTO, MAX_RTO
        self.rto = max(MIN_RTO, initial)

    def set_floor(self, seconds: float) -> None:
        """Keep the RTO at least `seconds` (and the cap at twice that if higher than MAX_RTO).

        Why: a path through a slow link queues a whole window there (a tree's slots x one
        frame each, per direction: the switches sum on the way, so the workers' count does
        not add). Where that queue outlasts MAX_RTO, every slot timed out before its result
        could come back and the resends only lengthened the queue: a 1/10-rate link at
        0.05 Mb/s held 16 frames for 0.8 s against a 0.3 s timer, and the run made no
        progress at all. The caller knows the path's rate; the samples alone cannot raise
        the RTO past a cap set for fast paths."""
        self.floor = max(MIN_RTO, seconds)
        self.cap = max(MAX_RTO, 2 * seconds)
        self.rto = min(self.cap, max(self.floor, self.rto))

    def sample(self, r: float, now: float) -> None:
        self.least = r if self.least is None else min(self.least, r)
        if self.srtt is None:
            self.srtt, self.rttvar = r, r / 2
        else:
            self.rttvar += 0.25 * (abs(self.srtt - r) - self.rttvar)
            self.srtt += 0.125 * (r - self.srtt)
        self.peak = max(r, self.peak * 0.5 ** ((now - self.peak_at) / PEAK_HALF_LIFE))
        self.peak_at = now
        self.rto = min(self.cap, max(self.floor, self.srtt + 4 * self.rttvar, 1.25 * self.peak))

    def sample_many(self, samples: list[float], now: float) -> None:
        """`sample` for each of a batch of latencies, all taken at `now`, in order (the peak
        decays once, to `now`: the same as sample() one by one)."""
        if self.srtt is None:
            self.sample(samples[0], now)
            samples = samples[1:]
            if not samples:
                return
        self.least = min(self.least, min(samples))
        srtt, rttvar = self.srtt, self.rttvar
        for r in samples:
            rttvar += 0.25 * (abs(srtt - r) - rttvar)
            srtt += 0.125 * (r - srtt)
        self.srtt, self.rttvar = srtt, rttvar
        self.peak = max(max(samples), self.peak * 0.5 ** ((now - self.peak_at) / PEAK_HALF_LIFE))
        self.peak_at = now
        self.rto = min(self.cap, max(self.floor, srtt + 4 * rttvar, 1.25 * self.peak))
