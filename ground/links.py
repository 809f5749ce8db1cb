"""The emulated link's burst, shared by the links (tc htb, emulation/veths.py) and the hosts
that pace their sends onto them (hosts/transport.py `UdpTransport.pace`); and the TCP
retransmission floor of a host on a slow link.

Why one place: a link is an htb class with ceil equal to rate, so what a frame waits on is
the class's cburst bucket. A host that paces its sends must hand the link bursts that fit
in that bucket, or htb holds the rest back and releases them one by one from its timer: a
timer interrupt, softirq and wake-up per frame and link, the cost that made 8 workers at
20 Mb/s CPU-bound (measured: 1.61x the wire time before pacing, 1.04x after). The two numbers only work together, so they live together.

The bucket is LINK_BURST_S of link time, at least LINK_BURST_MIN bytes (four full-size
frames): tc's default cburst is one MTU. On a slow link the minimum is capped at
LINK_BURST_MAX_S of link time (never below one full-size frame, LINK_BURST_FLOOR): at the
0.1 Mb/s of paper-scale runs 6,000 bytes were 0.48 s in which a link could carry twice its
rate, and at 0.01 Mb/s 4.8 s; there a link sends a few frames a second, so htb's timer per
frame costs nothing and the bucket need not be large. A transfer we time (megabytes) is
thousands of buckets long, so the bucket shortens no timed transfer by more than a fraction
of a percent.
A pacer books the link at most half a bucket ahead and tops it up once an eighth is left:
bursts of three eighths of the bucket (nine frames of K=64 values at 20 Mb/s). A pacer that
woke late (its process was not running) may book up to a quarter of a bucket in the past:
the link was idle that long, and htb's bucket refilled meanwhile. Then the pacer's sends
keep to the link's schedule (and to the departure clock of the agents, hosts/slots.py
`leaves`) instead of losing the time. In any interval the pacer hands the link at most its
rate times the interval plus three quarters of a bucket, so htb never holds a frame back;
except after an idle of a whole bucket's time (a call's start), when htb's bucket is full
whatever went before and the pacer hands it the whole bucket less one frame at once (hosts/
transport.py `_paced_limit`): booked from a quarter of a bucket in the past, the link's
bucket never fell below a quarter full during a backlogged call, link time the wire model
counts (emulation/wire_model.py subtracts the full bucket).

The TCP retransmission floor (`rto_min_ms`). Linux's TCP resends a segment that was not
acknowledged within its RTO, at least 200 ms. A real cluster's switch queues drain in
microseconds, so an RTO that fires means a loss there. The emulated links are thousands of
times slower while TCP's clock is not, so a healthy queue outlasts the RTO and TCP resends
what was only waiting, on the very links whose time is measured. Measured at paper scale
(k=8 fat-tree, core 1:2, parameter servers, no loss configured): at 128 workers and 0.08 Mb/s
a worker's link queues one 466-byte message from each of 127 peers (5.9 s), and 37% of all
segments were sent twice; at 32 workers and 0.72 Mb/s it queues an initial window (10 frames)
from each of 31 peers, 310 frames (5.2 s), and 11,011 segments were resent, the run 2.1x its
wire time. So a host on a shaped link gets a floor on its route's RTO of the time its link
carries RTO_QUEUE_FRAMES full frames, never below Linux's 200 ms and never above TCP's 120 s
cap: at 0.08 Mb/s 77.5 s, at 0.72 Mb/s 8.6 s, at 2.4 Mb/s 2.6 s, at 20 Mb/s 0.31 s, from
38.8 Mb/s up the default. The same runs then resent 0 and 579 segments. A segment really lost
(the drop simulator's loss, a failed link) is mostly resent by fast retransmit or a tail loss
probe (two round trips, whatever the floor); only a loss those miss waits for the floor, as a
real cluster's 200 ms is long beside its links' time too.
"""

from __future__ import annotations

from agglab.ground.wire import FRAME_BYTES as AGG_FRAME

LINK_BURST_S = 0.002          # the link bucket: this much link time ...
LINK_BURST_MIN = 6000         # ... and at least this many bytes ...
LINK_BURST_MAX_S = 0.1        # ... unless that is more than this much link time (below 0.48 Mb/s) ...
LINK_BURST_FLOOR = 1600       # ... and never less than one full-size frame (1,514 bytes) and a little
PACE_SHARE = 0.995            # a paced host sends at this share of its link's rate
RTO_QUEUE_FRAMES = 512        # the queue a host's TCP must outwait without resending ...
FRAME_BYTES = 1514            # ... of full-size frames
RTO_MIN_MS, RTO_MAX_MS = 200, 120_000    # Linux's default floor, TCP's cap


def burst_bytes(mbps: float) -> int:
    """The htb cburst of a `mbps` link, bytes."""
    per_second = mbps * 1e6 / 8
    return max(LINK_BURST_FLOOR, min(LINK_BURST_MIN, int(per_second * LINK_BURST_MAX_S)),
               int(per_second * LINK_BURST_S))


def pacing(mbps: float) -> tuple[float, float, float, float]:
    """(seconds per wire byte, booking horizon, top-up mark, catch-up) of a host paced onto
    a `mbps` link, the last three in seconds: send at PACE_SHARE of the rate, at most half a
    bucket booked ahead, topped up once less than an eighth is left, at most a quarter of a
    bucket booked in the past."""
    byte_time = 8 / (mbps * 1e6 * PACE_SHARE)
    bucket_s = burst_bytes(mbps) * byte_time
    return byte_time, bucket_s / 2, bucket_s / 8, bucket_s / 4


def rto_min_ms(mbps: float) -> int:
    """The TCP retransmission floor (ms) of a host on a `mbps` link (module docstring)."""
    queue_ms = RTO_QUEUE_FRAMES * FRAME_BYTES * 8 / (mbps * 1e6) * 1e3
    return int(min(RTO_MAX_MS, max(RTO_MIN_MS, round(queue_ms))))


# A software switch's interrupt coalescing (softswitch/daemon.py `coalesce`), as the agents'
# (hosts/slots.py COALESCE_*): after a turn of fewer than SWITCH_COALESCE_BATCH frames the
# switch waits this share of a full frame's time on its fastest port, at most
# SWITCH_COALESCE_MAX, before it looks again.
SWITCH_COALESCE_SHARE = 0.5
SWITCH_COALESCE_MAX = 0.001
SWITCH_COALESCE_BATCH = 8
SWITCH_COALESCE_MIN = 0.0002    # a shorter wait costs a wake-up of its own and gathers little
AGG_FRAME_BYTES = AGG_FRAME + 24     # an aggregation frame and Ethernet's preamble, FCS and gap


def switch_coalesce(rates_mbps) -> float:
    """Seconds a software switch whose ports run at `rates_mbps` waits after a small turn
    (0: some port is unshaped, so never).

    Why: at a frame per wake-up a switch spends ~40 us of CPU a frame, most of it the wake-up
    and the kernel's per-call work (docs/measurements.md, `make bench ONLY=limit`); at full
    batches ~7. On slow links frames come a few milliseconds apart on each port, so a switch
    that waits half a frame's time gathers the frames of its other ports into one turn; the
    frames it holds wait less than a frame's time on the wire, behind queues of a window. On
    fast links (above ~6.8 Mb/s) the wait would be shorter than SWITCH_COALESCE_MIN: none."""
    rates = list(rates_mbps)
    if not rates or not all(rates):
        return 0.0
    wait = min(SWITCH_COALESCE_MAX, SWITCH_COALESCE_SHARE * AGG_FRAME_BYTES * 8 / (max(rates) * 1e6))
    return wait if wait >= SWITCH_COALESCE_MIN else 0.0
