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
# The shared backoff (RtoEstimator.timed_out) raises the RTO at most to CEILING seconds, or
# the run's own ceiling (a third of its give-up time: it must resend well before it gives up).
CEILING = 3.0

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
    """RFC 6298 estimator plus a peak hold on the completion latency, and a shared backoff.

    Why the peak hold: a slot completes when the slowest worker's packet
    arrives, so latency samples are bimodal (the last worker sees ~0, the others
    wait for it) and stragglers come in bursts; SRTT + 4 RTTVAR then fires on
    every straggler episode, for the whole window at once.  The RTO is kept
    above 1.25 x the largest recent sample, which decays with a half-life of
    PEAK_HALF_LIFE seconds so one long stall does not slow loss recovery forever.

    Why a shared backoff (`timed_out`, `level`): the estimate is capped (MAX_RTO, or twice
    the path's floor), so when the emulator's CPU, not a link, is the bottleneck, round
    trips outgrow the cap and every slot's timer fires on every round; the resends add to
    the switches' load, the round trips grow further, and per-slot backoff (capped at the
    same RTO) does not stop it: 128 workers at 1 Mb/s on 2 cores sent the switches 2.2
    million frames where ~110k were needed, and gave up. As TCP backs off its one timer,
    each timeout period doubles the RTO the agent uses (`rto` = estimate x 2^level) while
    answers come late (`late`: SRTT outlasts the capped estimate; single samples do not
    count, as under random loss one is long whenever it waited for another worker's
    recovery), and
    while backed off the RTO is also at least the uncapped Jacobson/Karels estimate
    SRTT + 4 RTTVAR of the round trips measured: the timers follow the round trips however
    long, up to `ceiling`. Only a batch of samples all within the capped estimate (the path
    is as fast as the timers assume again) steps the level down, one halving per batch:
    under random loss results are mostly on time, so the level returns to 0 within a few
    results and loss recovery keeps its pace. Karn's rule is the caller's (hosts/slots.py
    `sample_rtt`: results a resend completed are not timed), so the samples that keep the
    backoff are the clean ones that really took long.
    """

    def __init__(self, initial: float, ceiling: float = CEILING) -> None:
        self.srtt: float | None = None
        self.least: float | None = None    # the smallest sample: the path's own round trip
        self.rttvar = self.peak = self.peak_at = 0.0
        self.floor, self.cap, self.ceiling = MIN_RTO, MAX_RTO, ceiling
        self.base = max(MIN_RTO, initial)   # the estimate; `rto` is it backed off `level` times
        self.level, self.backed_off_at, self.backoffs = 0, -float("inf"), 0
        self.late = True                    # SRTT outlasts the estimate (no sample yet: as if it did)
        self.rto = self.base

    def _update(self, base: float) -> None:
        self.base = base
        if not self.level:
            self.rto = base
            return
        measured = 0.0 if self.srtt is None else self.srtt + 4 * self.rttvar
        self.rto = min(max(self.cap, self.ceiling), max(base * 2 ** self.level, measured))

    def timed_out(self, now: float) -> None:
        """A slot's timer fired and it is resent: double the RTO, once per RTO period (a
        window's timers fire together; that is one timeout, as for TCP's one timer), and
        not past the ceiling; only while answers come late (SRTT outlasts the capped
        estimate, or no sample came yet). Why: under random loss timeouts are many but the
        round trips short on the whole; backing off there only idled the lost slots
        (8 workers, 5% loss: 35% slower)."""
        if (self.late and now >= self.backed_off_at + self.rto
                and self.rto < max(self.cap, self.ceiling)):
            self.level += 1
            self.backoffs += 1
            self.backed_off_at = now
            self._update(self.base)

    def reset_backoff(self) -> None:
        """A new path (a reroute): what the old one's timeouts said no longer holds."""
        self.level = 0
        self._update(self.base)

    def _settle(self) -> None:
        """After a batch of samples: are answers late (SRTT beyond the capped estimate)? If
        not, step the backoff down."""
        self.late = self.srtt > self.base
        if self.level and not self.late:
            self.level -= 1
        self._update(self.base)

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
        self._update(min(self.cap, max(self.floor, self.base)))

    def sample(self, r: float, now: float) -> None:
        """One latency `r`, taken at `now` (a batch of one)."""
        self.sample_many([r], now)

    def sample_many(self, samples: list[float], now: float) -> None:
        """Each of a batch of latencies, all taken at `now`, in order: SRTT and RTTVAR as
        RFC 6298 per sample, the peak decayed once (to `now`), the backoff settled once
        per batch (`_settle`), as the C and the Python paths both hand in a receive batch."""
        least = min(samples)
        self.least = least if self.least is None else min(self.least, least)
        srtt, rttvar = self.srtt, self.rttvar
        if srtt is None:
            srtt, rttvar = samples[0], samples[0] / 2
            samples_after = samples[1:]
        else:
            samples_after = samples
        for r in samples_after:
            rttvar += 0.25 * (abs(srtt - r) - rttvar)
            srtt += 0.125 * (r - srtt)
        self.srtt, self.rttvar = srtt, rttvar
        self.peak = max(max(samples), self.peak * 0.5 ** ((now - self.peak_at) / PEAK_HALF_LIFE))
        self.peak_at = now
        self.base = min(self.cap, max(self.floor, srtt + 4 * rttvar, 1.25 * self.peak))
        self._settle()
