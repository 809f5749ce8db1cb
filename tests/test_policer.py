"""The port policer (softswitch/policer.py, the twin of p4src/include/policer.p4), on a fake
clock: deterministic drop behaviour, rejects counted by reason, a job's ports untouched. The
end-to-end figure (a flood from a host in no job against a running job, measured in one run)
is `make bench`'s policer section and tests/test_e2e_tenants.py."""

from __future__ import annotations

import pytest

from agglab.softswitch.cli import CommandError
from agglab.softswitch.pipeline import Pipeline
from agglab.softswitch.policer import GREEN, RED, YELLOW, Meter
from agglab.softswitch.roles import REJECTS
from agglab.hosts.fuzz import Fuzzer


class Clock:
    def __init__(self):
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_a_meter_lets_its_burst_through_then_its_peak_rate():
    m = Meter()
    m.set_rates(0.001, 5, 0.002, 10)          # 1,000 / 2,000 frames per second, bursts 5 / 10
    colours = [m.color(0.0) for _ in range(12)]
    assert colours == [GREEN] * 5 + [YELLOW] * 5 + [RED] * 2
    assert m.color(499.0) == RED              # 0.998 of a peak token after 499 us
    assert m.color(500.0) == YELLOW           # one after 500 us
    assert m.admit(100, 1_000_000.0) == 10    # a second later: full buckets, the peak burst passes


def test_admit_is_color_applied_n_times():
    a, b = Meter(), Meter()
    for m in (a, b):
        m.set_rates(0.01, 20, 0.05, 40)
    t = 0.0
    for n in (3, 50, 1, 7, 100, 2):
        t += 333.0
        assert a.admit(n, t) == sum(b.color(t) != RED for _ in range(n)), (n, t)


def test_an_unconfigured_meter_and_an_unpoliced_port_pass_everything():
    assert Meter().admit(1000, 0.0) == 1000
    p = Pipeline(seed=0, clock=Clock())
    p.command("table_add port_policer police 3 =>")
    assert p.policer.admit(3, 500) == 500      # no rates set: green, as BMv2
    assert p.policer.admit(4, 500) == 500      # not in the table


def _policed_switch(clock):
    p = Pipeline(seed=0, clock=clock)
    p.command("table_add agg_job agg_child 4 0 2 1 => 0 2 1 0 1024 0")   # a job on port 1
    p.command("table_add port_policer police 3 =>")                     # port 3: in no job
    p.command("meter_set_rates port_meter 3 0.001:10 0.001:10")          # 1,000 frames/s, burst 10
    return p


def test_a_flood_from_a_port_in_no_job_is_cut_to_its_meter_and_counted_as_policed():
    clock = Clock()
    p = _policed_switch(clock)
    fz = Fuzzer("02:00:00:00:00:03", "10.0.0.3", seed=5, job=4, tree=0, epoch=2)
    frames = [f for f, _kind, _reason in fz.frames(2_000)]
    for i, frame in enumerate(frames):          # 2,000 frames over 0.2 s: 10,000 frames/s
        clock.t = 100.0 + i * 1e-4
        assert p.process(3, frame) == []
    rejects = {REJECTS[i]: int(n) for i, n in enumerate(p.counters["agg_rejects"]) if n}
    passed = 2_000 - rejects["policed"]
    assert 10 + 199 <= passed <= 10 + 200       # the burst, then 1,000/s for 0.2 s
    assert sum(rejects.values()) == 2_000       # the rest still rejected, each for its reason
    assert int(p.counters["agg_stats"][4]) == 2_000
    assert not p.registers["agg_bitmap"].any()


def test_the_batch_form_drops_the_same_number_and_a_job_port_is_never_metered():
    clock = Clock()
    p = _policed_switch(clock)
    assert p.policer.admit(3, 64, 64 * 300) == 10          # the burst
    clock.t += 0.005
    assert p.policer.admit(3, 64, 64 * 300) == 5           # 1,000/s for 5 ms
    clock.t += 1.0
    assert p.policer.admit(3, 64, 64 * 300) == 10          # never more than the burst at once
    assert int(p.counters["agg_rejects"][7]) == 54 + 59 + 54
    assert int(p.counters["agg_stats"][4]) == 54 + 59 + 54
    assert p.policer.admit(1, 10_000) == 10_000            # the job's port


def test_bad_meter_commands_are_refused():
    p = Pipeline(seed=0)
    with pytest.raises(CommandError, match="the peak rate must not be below the committed rate"):
        p.command("meter_set_rates port_meter 3 0.002:10 0.001:10")     # peak below committed
    with pytest.raises(CommandError, match=r"meter index 900 out of range \(0\.\.511\)"):
        p.command("meter_set_rates port_meter 900 0.001:10 0.001:10")   # no such index
    with pytest.raises(CommandError, match=r"Invalid meter name \(nometer\)"):
        p.command("meter_set_rates nometer 3 0.001:10 0.001:10")
    p.command("meter_set_rates port_meter 3 0.001:10 0.002:20")
    assert "0.002" in p.command("meter_get_rates port_meter 3")
