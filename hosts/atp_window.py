"""The ATP worker's congestion window: delay-based AIMD (as Swift and TIMELY), pure.

Why a window that moves: every worker of every job sends to its job's PS, and when the
jobs' PSes sit in one pod every worker's packets cross the same core link. With a fixed
window of 384 blocks, four jobs of four workers offered several times what a 5 Mb/s core
link carries: its queue overflowed, the retransmission timers fired before results came
back, and the resends filled the queue again (measured: about 78,000 frames sent and
102,000 dropped on that link, no block completed for seconds).

Why delay, not loss: the switches do not see the link's (htb) queue, so they cannot mark
ECN as ATP's switches do; and the drop simulator's random loss (`--loss`) is not
congestion. A loss-based AIMD read every random loss as congestion and held the window at
its floor (a 2-job 200,000-element run at 5% loss became far too slow). A standing queue
shows as round trips above the path's minimum, whatever the loss.

The signal: a sample is a block's time from its first send to a result no resend went into
(the PS marks the others RETX: a result a resend contributed to, or one sent again for a
resend). Not Karn's rule (blocks never resent): when the queue outgrows the timers every
block is resent, and only these results still show the queue; a result with loss recovery
in it would read random loss as delay. `base` is the smallest sample.

A round lasts one round trip and at least MIN_SAMPLES samples: it ends at the first sample
of a block sent after it began, which is the next round's first. If even the round's
smallest sample exceeds `base + max(MIN_TARGET, base)`, a queue stood the whole round: the
window is cut once, in proportion to the excess (Swift's rule, at most halved). The
smallest sample, because a block's result waits for the slowest worker, so single samples
are bimodal. Otherwise it grows per result: +1 until the first cut (slow start from
INITIAL), then +1 per window of results, and after HAI_ROUNDS low rounds in a row
+HAI_ROUNDS per window (TIMELY's hyperactive increase: under random loss blocks take
timeouts to finish, and +1 per window took tens of seconds to regain what a transient cut
took). No growth in a round after a high one. A timeout cuts only when this round's samples
so far are high too. The window stays within [FLOOR, maximum], the maximum being the
configured `--window` (the paper's window).
"""

from __future__ import annotations

import math

INITIAL = 16          # blocks out before the first round trip is known
FLOOR = 4             # the window never shrinks below this many blocks
MIN_TARGET = 0.020    # s of queueing tolerated above the base round trip, at least (scheduling noise)
MIN_SAMPLES = 4       # a round is judged on at least this many samples (one is noise)
BETA = 0.8            # Swift's cut: cwnd *= 1 - BETA * (rtt - limit) / rtt
MAX_CUT = 0.5         # at most halved per round
HAI_ROUNDS = 5        # this many rounds in a row below the limit: grow HAI_ROUNDS times faster (TIMELY's HAI)


class DelayWindow:
    """Feed it what the worker sees (`on_result`, `on_sample`, `on_timeout`); read `size`."""

    def __init__(self, maximum: int, initial: int = INITIAL, floor: int = FLOOR,
                 min_target: float = MIN_TARGET):
        self.maximum = max(1, int(maximum))
        self.floor = max(1, min(int(floor), self.maximum))
        self.cwnd = float(min(self.maximum, max(self.floor, initial)))
        self.min_target = min_target
        self.base = math.inf
        self.slow_start = True
        self.cuts = 0
        self._round_start = -math.inf
        self._round_min = math.inf
        self._round_n = 0
        self._cut_this_round = False
        self._congested = False
        self._low_rounds = 0

    @property
    def size(self) -> int:
        """Blocks the worker may have outstanding now."""
        return max(self.floor, min(self.maximum, int(self.cwnd)))

    @property
    def limit(self) -> float:
        """The round trip above which a queue is standing: base + max(MIN_TARGET, base)."""
        return self.base + max(self.min_target, self.base)

    def on_result(self) -> None:
        """Any block's result: the window grows unless the last round judged was congested."""
        if not self._congested:
            step = 1.0 if self.slow_start else (HAI_ROUNDS if self._low_rounds >= HAI_ROUNDS else 1.0) / self.cwnd
            self.cwnd = min(float(self.maximum), self.cwnd + step)

    def on_sample(self, sent_at: float, now: float) -> None:
        """A block's result at `now`, `sent_at` its first send, no loss recovery in it: one
        round trip. Ends and judges rounds."""
        rtt = now - sent_at
        self.base = min(self.base, rtt)
        if sent_at >= self._round_start and self._round_n >= MIN_SAMPLES:   # a round trip passed
            high = self._round_min > self.limit   # judge the round's samples (this one is the next's)
            if high and not self._cut_this_round:
                self._cut(self._round_min)
            self._congested = high
            self._low_rounds = 0 if high else self._low_rounds + 1
            self._round_start, self._round_min, self._round_n, self._cut_this_round = now, rtt, 1, False
        else:
            self._round_min = min(self._round_min, rtt)
            self._round_n += 1

    def on_timeout(self) -> None:
        """A block's timer fired. Random loss is not congestion: cut only if this round's
        samples so far all stood above the limit (and not already this round)."""
        if self._round_n >= MIN_SAMPLES and self._round_min > self.limit and not self._cut_this_round:
            self._cut(self._round_min)
            self._congested = True
            self._low_rounds = 0

    def _cut(self, rtt: float) -> None:
        factor = max(MAX_CUT, 1.0 - BETA * (rtt - self.limit) / rtt)
        self.cwnd = max(float(self.floor), self.cwnd * factor)
        self.slow_start = False
        self._cut_this_round = True
        self.cuts += 1
