"""The fidelity verdict of a run only a couple of probe samples long.

Why: the probe samples the link counters every SAMPLE_SECONDS (0.1 s), and the window it read
a link's rate over runs from the sample before the first bytes to the one after the last. For
OmniReduce at density 0.01 in the BMv2 suite (8 workers, 0.525 Mb/s, 110,080 int32) a run is
0.17 s: a run 95% busy was called 79% busy and flagged CPU-bound (docs/measurements.md,
2026-12-07). The run's own duration, from the workers' reports, settles it.
"""

import pytest

from agglab.emulation.fidelity import BUSY_MIN, _Direction, bottleneck
from agglab.emulation.session import run_seconds

RATE = 0.525                       # Mb/s
BYTES_PER_S = RATE * 1e6 / 8
SENT = 10_942                      # bytes the bottleneck carried (h1->s1 in the suite's run)


def link(points):
    d = _Direction("h1->s1", "s1-eth1", "rx_bytes", RATE)
    d.samples = list(points)
    return d


def short_run(start: float, seconds: float, busy: float):
    """Counter samples every 0.1 s (and a last one at the probe's stop) of a run from `start`
    lasting `seconds`, the link sending SENT bytes at its rate from `start` (busy = the share
    of the run it was sending)."""
    ends = start + busy * seconds

    def counted(t: float) -> float:
        return round(min(max(t - start, 0.0), ends - start) * SENT / (ends - start))
    times = [0.0, 0.1, 0.2, round(start + seconds + 0.03, 3)]
    return link([(t, counted(t)) for t in times])


def test_a_busy_run_of_two_samples_is_link_bound_with_its_own_duration():
    seconds = SENT * 8 / (RATE * 1e6) / 0.95           # 95% busy: 0.175 s
    d = short_run(0.02, seconds, 0.95)
    sampled = bottleneck([d])["utilisation"]
    assert sampled < BUSY_MIN                          # what the samples alone said (83% here)
    assert bottleneck([d], run_seconds=seconds)["utilisation"] >= 0.94


def test_a_slow_short_run_stays_not_link_bound():
    """The run's duration is an estimate that can only understate: a run that left its link
    idle a third of the time is not made link-bound by it."""
    seconds = SENT * 8 / (RATE * 1e6) / 0.64           # the first run: 0.26 s for 0.167 s of wire
    d = short_run(0.02, seconds, 0.64)
    got = bottleneck([d], run_seconds=seconds)["utilisation"]
    assert 0.6 < got < BUSY_MIN


def test_a_long_run_keeps_its_inner_interval_rate():
    """Over several samples the rate over the inner intervals (here the link's full rate)
    stands even if the run's time counts a slow start (a higher estimate is kept)."""
    step = round(0.1 * BYTES_PER_S)
    d = link([(i / 10, i * step) for i in range(11)])
    assert bottleneck([d], run_seconds=2.0)["utilisation"] >= 0.99
    assert bottleneck([d])["utilisation"] >= 0.99


def test_run_seconds_spans_first_start_to_last_end():
    reports = [{"ok": True, "passed_gate_at": 10.02, "done_at": 10.15},
               {"ok": True, "passed_gate_at": 10.0, "done_at": 10.175}]
    assert run_seconds(reports) == pytest.approx(0.175)
    assert run_seconds(reports + [{"ok": False, "error": "x"}]) is None      # a worker failed
    assert run_seconds([{"ok": True, "wall": 0.2}]) is None                  # a report without clocks
    assert run_seconds([]) is None
