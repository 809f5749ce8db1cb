"""hosts/atp_window.py: the ATP worker's delay-based window, fed round trips by hand.

Each test drives whole rounds: `window` blocks sent at `t`, every result back at
`t + rtt`, the way a worker with that much outstanding sees them. A round is judged when
it ends, at the first result of a block sent after it began: the next round's first."""

from __future__ import annotations

import pytest

from agglab.hosts import atp_window
from agglab.hosts.atp_window import FLOOR, INITIAL, MIN_SAMPLES


def DelayWindow(maximum, **kw):  # noqa: N802 - the class, with a 5 ms target the numbers below assume
    return atp_window.DelayWindow(maximum, min_target=0.005, **kw)


def round_trip(w: DelayWindow, t: float, rtt: float, results: int | None = None) -> float:
    """`results` blocks (default: the current window) sent at t, answered at t + rtt, once each."""
    n = w.size if results is None else results
    for _ in range(n):
        w.on_result()
        w.on_sample(t, t + rtt)
    return t + rtt


def test_flat_delay_grows_to_the_maximum_and_no_further():
    w = DelayWindow(384)
    assert w.size == INITIAL
    t = 0.0
    sizes = []
    for _ in range(12):
        t = round_trip(w, t, 0.010)
        sizes.append(w.size)
    assert sizes[0] == 2 * INITIAL                       # slow start: +1 per result
    assert sizes == sorted(sizes) and sizes[-1] == 384
    assert w.cuts == 0


def test_after_a_cut_flat_delay_grows_by_about_one_per_round_then_faster():
    w = DelayWindow(384)
    t = round_trip(w, 0.0, 0.010)
    t = round_trip(w, t, 0.100)                         # a standing queue ...
    assert w.cuts == 0
    high = w.size
    t = round_trip(w, t, 0.010)                         # ... judged as this round begins: cut, no growth
    assert w.cuts == 1 and not w.slow_start
    assert w.size == high // 2                          # 100 ms against a 20 ms limit: halved
    before = w.size
    for _ in range(atp_window.HAI_ROUNDS - 1):
        t = round_trip(w, t, 0.010)
    assert before + atp_window.HAI_ROUNDS - 2 <= w.size <= before + atp_window.HAI_ROUNDS
    assert w.cuts == 1 and not w.slow_start
    before = w.size
    t = round_trip(w, t, 0.010)                         # HAI_ROUNDS low rounds in a row: faster
    assert not w.slow_start and w.size >= before + atp_window.HAI_ROUNDS - 1


def test_rising_delay_cuts_once_per_round_down_to_the_floor():
    w = DelayWindow(384, initial=200)
    t = round_trip(w, 0.0, 0.010)
    start = w.size
    rtts = (0.030, 0.060, 0.120, 0.240, 0.480, 0.960, 1.9, 3.8, 7.6, 15.0)
    sizes = []
    for rtt in rtts + (15.0,):                           # the last round only judges the one before
        t = round_trip(w, t, rtt)
        sizes.append(w.size)
    assert w.cuts == len(rtts)                           # one cut per round, not per sample
    assert sizes[0] >= start                             # the first high round is not judged yet
    assert sizes[0] * 0.5 <= sizes[1] < sizes[0]         # at most halved per round
    assert all(b < a for a, b in zip(sizes[1:], sizes[2:]) if a > FLOOR)
    assert sizes[-1] == FLOOR


def test_a_larger_excess_cuts_deeper():
    a, b = DelayWindow(384, initial=100), DelayWindow(384, initial=100)
    for w, rtt in ((a, 0.025), (b, 0.200)):
        t = round_trip(w, 0.0, 0.010)
        t = round_trip(w, t, rtt)
        round_trip(w, t, rtt)
    assert a.cuts == b.cuts == 1
    assert b.size < a.size < 384                         # both cut from the maximum they grew to


def test_delay_within_the_target_does_not_cut():
    w = DelayWindow(384, initial=20)
    t = round_trip(w, 0.0, 0.010)
    for _ in range(6):
        t = round_trip(w, t, 0.019)                      # base 10 ms, limit 20 ms
    assert w.cuts == 0 and w.size > 20


def test_one_late_sample_in_a_round_does_not_cut():
    w = DelayWindow(384, initial=20)
    t = round_trip(w, 0.0, 0.010)
    for _ in range(4):
        w.on_result()
        w.on_sample(t, t + 0.500)                        # waited for a straggling worker
        t = round_trip(w, t, 0.010)
    assert w.cuts == 0


def test_timeouts_alone_do_not_cut():
    w = DelayWindow(384, initial=32)
    t = round_trip(w, 0.0, 0.010)
    size = w.size
    for _ in range(50):
        w.on_timeout()                                   # random loss, delay flat
    assert w.size == size and w.cuts == 0
    round_trip(w, t, 0.010)
    assert w.size > size                                 # and it keeps growing


def test_a_timeout_cuts_when_this_rounds_delay_is_high_too():
    w = DelayWindow(384, initial=64)
    t = round_trip(w, 0.0, 0.010)
    w.on_sample(t, t + 0.2)                              # ends the flat round, begins one at t + 0.2
    for _ in range(MIN_SAMPLES - 2):
        w.on_sample(t, t + 0.2)                              # sent before it began: this round's so far
    size = w.size
    w.on_timeout()
    assert w.cuts == 0                                   # too few samples to judge on
    w.on_sample(t, t + 0.2)
    w.on_timeout()
    assert w.cuts == 1 and w.size < size
    w.on_timeout()
    assert w.cuts == 1                                   # once per round


def test_a_timeout_before_any_round_trip_does_not_cut():
    w = DelayWindow(384)
    w.on_timeout()
    assert w.cuts == 0 and w.size == INITIAL


@pytest.mark.parametrize("maximum", [1, 3, 8])
def test_the_window_stays_within_the_configured_maximum(maximum):
    w = DelayWindow(maximum)
    assert 1 <= w.size <= maximum
    t = 0.0
    for _ in range(5):
        t = round_trip(w, t, 0.01)
    assert w.size == maximum
    for rtt in (1.0, 2.0, 4.0):
        t = round_trip(w, t, rtt)
    assert 1 <= w.size <= maximum


def test_the_limit_is_the_base_plus_the_larger_of_the_target_and_the_base():
    w = atp_window.DelayWindow(64)
    w.on_sample(0.0, 0.002)
    assert w.limit == pytest.approx(0.002 + atp_window.MIN_TARGET)
    w = atp_window.DelayWindow(64)
    w.on_sample(0.0, 0.5)
    assert w.limit == pytest.approx(1.0)


def test_a_round_lasts_until_it_has_enough_samples():
    w = DelayWindow(384, initial=64)
    t = round_trip(w, 0.0, 0.010)
    for _ in range(MIN_SAMPLES):                         # one block a round trip, each one late
        w.on_sample(t, t + 0.2)
        t += 0.2
    assert w.cuts == 0                                   # the first closed the flat round; 3 are too few
    w.on_sample(t, t + 0.2)
    assert w.cuts == 1
