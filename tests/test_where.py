"""Where a paper's figure appears (experiments/where.py, where_report.py): a claim's bound swept
over a knob, the value where it reaches the paper's figure, and the report's section."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from agglab.experiments.definition import ConfigError
from agglab.experiments.definition_file import load_definition, parse_definition, read_yaml
from agglab.experiments.paper_figures import ring_vs_innet
from agglab.experiments.where import Curve, curve, curves
from agglab.experiments.where_report import section

TRENDS = Path(__file__).resolve().parent.parent / "experiments" / "trends"


def test_the_ring_claim_follows_the_analytic_ring_over_in_network_ratio(tmp_path):
    # ring / in-network on one switch is 2(n-1)/n of the gradient at TCP's efficiency over 1x at
    # the aggregation frame's (paper_figures.ring_vs_innet, the closed form); the wire model
    # computes it from routes and frames: the swept bounds must follow the closed form
    d = load_definition(TRENDS / "switchml.yaml")
    index = next(i for i, c in enumerate(d.claims_raw) if c["text"].startswith("ring / in-network"))
    (c,) = curve(d, index, "workers", [2, 4, 8, 16], tmp_path)
    assert [v for v, _, _ in c.points] == [2, 4, 8, 16]
    for n, bound, _ in c.points:
        assert bound == pytest.approx(ring_vs_innet(n), rel=0.02), n


def test_a_knob_the_claim_selects_on_is_replaced_in_its_selectors(tmp_path):
    # ATP / static "at 4 jobs": swept over jobs, the claim compares the two series at each count.
    # Spread, one static tree per job shares the core: two jobs twice the static load, four 4x
    # (ATP's PS's ToR link carries 3 streams whatever the jobs)
    # (the bytes alone: without the trend's compute, which its training bound adds to both sides)
    d = load_definition(TRENDS / "atp.yaml")
    (c,) = curve(d, 0, "jobs", [1, 2, 4], tmp_path, fixed={"placement": "spread", "compute_profile": None})
    one, two, four = (b for _, b, _ in c.points)
    assert two == pytest.approx(2 * one, rel=0.02) and four == pytest.approx(4 * one, rel=0.02)
    # with the trend's compute each iteration's time grows by the same amount on both sides,
    # so every ratio moves toward 1 from its bytes-only value
    (trained,) = curve(d, 0, "jobs", [1, 2, 4], tmp_path, fixed={"placement": "spread"})
    for (_, bytes_only, _), (_, with_compute, _) in zip(c.points, trained.points):
        assert min(bytes_only, 1.0) < with_compute < max(bytes_only, 1.0), (bytes_only, with_compute)
    # packed (the trend's), four jobs each fill a pod: ATP's two levels and its ToR's multicast
    # carry as many bytes per link as static's trees
    (packed,) = curve(d, 0, "jobs", [4], tmp_path)
    assert packed.today == 4 and packed.points[0][1] == pytest.approx(1.0, rel=0.02)


def test_with_holds_a_setting_the_trend_does_not_run(tmp_path):
    # RAT's PS / RAT with a central PS (rank 0's host link carries every other worker's
    # gradient each way) grows with the workers; with the trend's sharded PS it stays near 3
    d = load_definition(TRENDS / "rat.yaml")
    (sharded,) = curve(d, 0, "workers", [8, 16], tmp_path, fixed={"racks": 16, "hosts_per_rack": 4})
    (central,) = curve(d, 0, "workers", [8, 16], tmp_path,
                       fixed={"ps_layout": "central", "racks": 16, "hosts_per_rack": 4})
    assert central.today is None and central.name == "workers (with ps_layout=central, racks=16, hosts_per_rack=4)"
    assert all(c > 2 * s for (_, c, _), (_, s, _) in zip(central.points, sharded.points))
    assert central.points[1][1] > 1.8 * central.points[0][1]        # twice the workers, about twice the ratio


def test_reached_at_is_the_first_value_whose_bound_reaches_the_paper():
    c = Curve("t", "claim", 10.0, "at_least", "spines", 2,
              [(2, 2.0, 10.0), (4, 9.9, 10.0), (8, 10.5, 10.0), (16, 20.0, 10.0)])
    assert c.reached_at == 8 and c.verdict() == "reached at spines = 8"
    short = Curve("t", "claim", 25.0, "at_least", "racks", 4, [(4, 2.6, 25.0), (8, 3.1, 25.0), (16, 3.0, 25.0)],
                  why="the PS is sharded")
    assert short.reached_at is None
    assert short.verdict() == "not reached up to racks = 16 (largest bound 3.1, at 8): the PS is sharded"
    falls = Curve("t", "claim", 1.0, "at_most", "workers", 2, [(2, 1.5, 1.0), (4, 0.9, 1.0)])
    assert falls.reached_at == 4


def test_a_claim_without_knobs_has_no_curve(tmp_path):
    assert curves(load_definition(TRENDS / "bml.yaml"), tmp_path) == []


@pytest.mark.parametrize("where, problem", [
    ({"knob": "spines", "values": [2]}, "must be a list"),
    ([{"knob": "colour", "values": [2]}], "claims[0].where[0].knob: must be a run or network key, got 'colour'"),
    ([{"knob": "spines", "values": []}], "claims[0].where[0].values: must be a non-empty list"),
    ([{"knob": "spines", "values": [2], "step": 2}], "step"),
])
def test_a_bad_where_is_refused_in_one_line(where, problem):
    raw = read_yaml(TRENDS / "packing.yaml")
    raw["claims"][0]["where"] = where
    with pytest.raises(ConfigError, match=problem.replace("[", r"\[").replace("]", r"\]")):
        parse_definition(raw, "packing.yaml")


def test_the_report_section_has_a_row_and_a_plot_per_knob(tmp_path):
    d = load_definition(TRENDS / "atp.yaml")
    outcome = SimpleNamespace(suite=SimpleNamespace(definitions=[d]), rows=[])
    lines = section(outcome, tmp_path / "topologies", tmp_path)
    assert lines[0] == "## Where the paper's figure appears"
    rows = [line for line in lines if line.startswith("| atp |")]
    assert len(rows) == 3
    assert "| jobs = 4 |" in rows[0] and "| placement = packed |" in rows[1] and "| atp_multicast = True |" in rows[2]
    for row in rows:
        png = row.rstrip(" |").rsplit("| ", 1)[1]
        assert (tmp_path / png).stat().st_size > 1000, png


def _pace_curves(tmp_path, knob, values, fixed=None):
    d = load_definition(TRENDS / "pace.yaml")
    return {c.claim.split("model=")[1].rstrip(")"): c for c in curve(d, 0, knob, values, tmp_path, fixed=fixed)}


def test_pace_is_swept_with_the_pure_model_and_tends_to_fifo_on_a_slow_link(tmp_path):
    # no run measured the emulator's cost at a swept point, so PACE's bound there is the pure
    # iteration model at the modelled start-up: when communication dwarfs compute (a slow
    # link) both schedules take the communication's time, so the order cannot matter; nearer
    # the rate where compute and communication meet it does (on a very fast link FIFO still
    # waits for its 5 ms cycles, so the ratio does not return to 1 there)
    by_model = _pace_curves(tmp_path, "link", ["0.02Gbps", "10Gbps"])
    assert set(by_model) == {"resnet50", "vgg16", "bert-base"}
    for model, c in by_model.items():
        slow, today = (b for _, b, _ in c.points)
        assert c.today == "10Gbps"
        assert slow == pytest.approx(1, abs=0.01), model
        assert today > slow + 0.02, model


def test_pace_loses_to_fifo_once_each_chunk_pays_a_large_start_up(tmp_path):
    # PACE cuts the gradient into 4 MB chunks and FIFO fuses into a 64 MB buffer, so PACE makes
    # more calls: past some start-up cost per call its order cannot pay for them
    by_model = _pace_curves(tmp_path, "alpha_us", [50, 200, 5000])
    for model, c in by_model.items():
        assert c.today == 50                         # PaceOptions' modelled start-up, the trend's own
        at50, at200, at5000 = (b for _, b, _ in c.points)
        assert at50 > at200 > at5000 and at5000 < 1, model


def test_a_pace_option_is_a_knob_only_in_a_pace_trend():
    raw = read_yaml(TRENDS / "switchml.yaml")
    raw["claims"][0]["where"] = [{"knob": "alpha_us", "values": [5, 50]}]
    with pytest.raises(ConfigError, match=r"claims\[0\]\.where\[0\]\.knob: must be a run or network key, got 'alpha_us'"):
        parse_definition(raw, "switchml.yaml")
