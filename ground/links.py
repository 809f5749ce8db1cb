"""The emulated link's burst, shared by the links (tc htb, emulation/veths.py) and the hosts
that pace their sends onto them (hosts/transport.py `UdpTransport.pace`).

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
rate times the interval plus three quarters of a bucket, so htb never holds a frame back.
"""

from __future__ import annotations

LINK_BURST_S = 0.002          # the link bucket: this much link time ...
LINK_BURST_MIN = 6000         # ... and at least this many bytes ...
LINK_BURST_MAX_S = 0.1        # ... unless that is more than this much link time (below 0.48 Mb/s) ...
LINK_BURST_FLOOR = 1600       # ... and never less than one full-size frame (1,514 bytes) and a little
PACE_SHARE = 0.995            # a paced host sends at this share of its link's rate


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
