"""Retransmission timeout for the agent's per-slot timers.

Which latencies the agent samples (hosts/agent.py, `_on_payload`), and why it
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

MIN_RTO = 0.002          # below this, timer granularity and scheduling noise dominate
MAX_RTO = 1.0            # cap of the estimate and of the per-slot exponential backoff
PEAK_HALF_LIFE = 0.5     # seconds for the latency peak hold to decay by half


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
        self.rttvar = self.peak = self.peak_at = 0.0
        self.rto = max(MIN_RTO, initial)

    def sample(self, r: float, now: float) -> None:
        if self.srtt is None:
            self.srtt, self.rttvar = r, r / 2
        else:
            self.rttvar += 0.25 * (abs(self.srtt - r) - self.rttvar)
            self.srtt += 0.125 * (r - self.srtt)
        self.peak = max(r, self.peak * 0.5 ** ((now - self.peak_at) / PEAK_HALF_LIFE))
        self.peak_at = now
        self.rto = min(MAX_RTO, max(MIN_RTO, self.srtt + 4 * self.rttvar, 1.25 * self.peak))
