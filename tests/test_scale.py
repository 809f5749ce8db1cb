"""Many workers: a job's size is limited per switch (the contribution bitmap) and by the
header's rank field, checked before any network is built; a run past one switch's bitmap is
exact; calibration finds and stores a ceiling per shape, and the experiments use it for a
trend of that size."""

from __future__ import annotations

import json

import pytest

from agglab.controller import tree_install, trees
from agglab.controller.topology import switches, workers as worker_hosts
from agglab.emulation import fidelity
from agglab.emulation.session import graph_for
from agglab.ground import wire
from agglab.ground.runspec import RunSpec


# -- limits, checked before anything is built ----------------------------------------------
def test_a_tree_of_switches_takes_more_workers_than_one_bitmap():
    """k=8 fat-tree, 128 workers: 4x one switch's bitmap, yet no switch aggregates more than
    its bitmap holds, so the run is accepted."""
    g = graph_for(RunSpec(topology="fattree", k=8, workers=128, tree="rat"))
    assert len(worker_hosts(g)) == 128 > wire.MAX_WORKERS
    roles = tree_install.roles_of(trees.compute("rat", g, worker_hosts(g)), g)
    fan_in = max(len(r.children) for r in roles.values())
    assert 1 < fan_in <= wire.MAX_WORKERS
    assert len(switches(g)) == 80


@pytest.mark.parametrize("workers", [33, 64])
def test_one_switch_past_its_bitmap_is_refused_naming_it(workers):
    with pytest.raises(ValueError, match=rf"^switch s1 would aggregate {workers} workers, but one switch "
                                         rf"aggregates at most {wire.MAX_WORKERS} workers"):
        graph_for(RunSpec(topology="single", workers=workers))


def test_a_leaf_spine_rack_past_the_bitmap_is_refused_naming_its_switch():
    """4 racks of 40 (leaf-spine grows its racks to hold --workers): every leaf's fan-in is 40."""
    with pytest.raises(ValueError, match=r"switch \w+ would aggregate 40 children on tree 0, but its "
                                         r"contribution bitmap holds 32"):
        graph_for(RunSpec(topology="leafspine", workers=160, tree="spt"))


def test_more_ranks_than_the_header_holds_are_refused_but_not_for_host_baselines():
    assert wire.MAX_RANKS == 256                       # agg_h.worker is 8 bits wide
    with pytest.raises(ValueError, match="at most 256 workers per job aggregate in the network"):
        graph_for(RunSpec(topology="fattree", k=12, workers=257, tree="rat"))
    g = graph_for(RunSpec(topology="fattree", k=12, workers=257, algorithm="ring"))
    assert len(worker_hosts(g)) == 257


# -- calibration per shape -------------------------------------------------------------------
def _fake(faithful_up_to: float, tried: list):
    def try_rate(rate):
        tried.append(rate)
        return {"rate_mbps": rate, "faithful": rate <= faithful_up_to}
    return try_rate


def test_search_steps_down_when_the_start_is_too_fast_then_bisects():
    from agglab.calibrate import search

    tried = []
    good, bad, probes = search(_fake(0.3, tried), start=2.0, factor=2.0, limit=200, refine=2)
    assert tried == [2.0, 1.0, 0.5, 0.25, 0.375, 0.3125]
    assert (good, bad) == (0.25, 0.3125) and len(probes) == 6


def test_search_steps_up_from_a_faithful_start():
    from agglab.calibrate import search

    tried = []
    good, bad, _ = search(_fake(10.0, tried), start=2.0, factor=2.0, limit=200, refine=1)
    assert tried == [2.0, 4.0, 8.0, 16.0, 12.0]
    assert (good, bad) == (8.0, 12.0)


def test_search_gives_up_after_its_steps_down():
    from agglab.calibrate import search

    tried = []
    good, bad, _ = search(_fake(0.01, tried), start=2.0, factor=2.0, limit=200, refine=2, down=3)
    # three steps down, then two past the start (slow links may lose to the timers), then stop
    assert tried == [2.0, 1.0, 0.5, 0.25, 4.0, 8.0] and good is None


@pytest.fixture
def calibration(tmp_path, monkeypatch):
    path = tmp_path / "calibration.json"
    monkeypatch.setenv("AGGLAB_CALIBRATION", str(path))
    return path


def test_shape_ceilings_are_kept_beside_the_default_record(calibration):
    fidelity.save_calibration({"ceiling_mbps": 20.0, "workers": 8})
    fidelity.save_shape_calibration("fattree-k8-w128-rat", {"ceiling_mbps": 0.3, "workers": 128})
    fidelity.save_shape_calibration("fattree-k8-w64-rat", {"ceiling_mbps": 0.8, "workers": 64})
    fidelity.save_calibration({"ceiling_mbps": 18.0, "workers": 8})         # a new default run
    data = json.loads(calibration.read_text())
    assert data["ceiling_mbps"] == 18.0 and set(data["shapes"]) == {"fattree-k8-w128-rat", "fattree-k8-w64-rat"}
    assert fidelity.ceiling_for(8) == (18.0, "single-w8")
    assert fidelity.ceiling_for(16) == (0.8, "fattree-k8-w64-rat")        # the smallest shape covering 16
    assert fidelity.ceiling_for(100) == (0.3, "fattree-k8-w128-rat")
    assert fidelity.ceiling_for(200) is None                               # nothing that large


def test_shape_key_names_the_shape():
    assert fidelity.shape_key("fattree", 128, 8, "rat") == "fattree-k8-w128-rat"
    assert fidelity.shape_key("single", 8) == "single-w8"


def test_a_trend_larger_than_the_default_calibration_runs_at_its_shape_ceiling(calibration, tmp_path):
    from agglab.experiments.runner import ceiling, load_suite, trend_ceiling

    fidelity.save_calibration({"ceiling_mbps": 20.0, "workers": 8})
    fidelity.save_shape_calibration("fattree-k8-w128-rat", {"ceiling_mbps": 1.0, "workers": 128})
    small = tmp_path / "small.yaml"
    small.write_text("name: small\ntitle: t\nclaim: c\nnetwork: {link: 100Gbps, gradient: 100MB}\n"
                     "emulated: {gradient: 512KiB}\nrun: {topology: single}\n"
                     "series: {a: {algorithm: switchml}}\nsweep: {workers: [2, 4, 8]}\nx: workers\n")
    big = tmp_path / "big.yaml"
    big.write_text(small.read_text().replace("[2, 4, 8]", "[8, 32, 128]").replace("single", "fattree, k: 8")
                   .replace("name: small", "name: big"))
    for path, want in ((small, ceiling()[0]), (big, 0.8)):
        suite = load_suite(path)
        assert trend_ceiling(suite, suite.definitions[0]) == want


def test_ring_and_ps_run_at_their_own_ceiling_and_it_answers_no_other_trend(calibration, tmp_path):
    """A host baseline's calibrated shape (agglab calibrate --scheme ring/ps) sets the rate of a
    trend of ring and PS (the lower of the two), never an in-network trend's."""
    from agglab.experiments.runner import load_suite, trend_ceiling

    fidelity.save_calibration({"ceiling_mbps": 20.0, "workers": 8})
    fidelity.save_shape_calibration("fattree-k8-w128-rat", {"ceiling_mbps": 0.1, "workers": 128,
                                                            "shape": {"topology": "fattree", "scheme": "dense"}})
    fidelity.save_shape_calibration("fattree-k8-w128-ring", {"ceiling_mbps": 0.05, "workers": 128,
                                                             "shape": {"topology": "fattree", "scheme": "ring"}})
    head = ("title: t\nclaim: c\nnetwork: {link: 100Gbps, gradient: 100MB}\nemulated: {gradient: 512KiB}\n"
            "run: {topology: fattree, k: 8}\nsweep: {workers: [128]}\nx: workers\n")
    trends = {"hosts": "series: {ring: {algorithm: ring}, ps: {algorithm: ps}}\n",
              "ring": "series: {ring: {algorithm: ring}}\n", "innet": "series: {a: {algorithm: switchml}}\n"}
    for name, series in trends.items():
        (tmp_path / f"{name}.yaml").write_text(f"name: {name}\n" + head + series)

    def rate(name):
        suite = load_suite(tmp_path / f"{name}.yaml")
        return trend_ceiling(suite, suite.definitions[0])
    assert fidelity.ceiling_for(128) == (0.1, "fattree-k8-w128-rat")      # the ring's record is not a shape's
    assert rate("ring") == round(0.05 * 0.8, 3)
    assert rate("hosts") == round(0.1 * 0.8, 3)                       # ps not calibrated: the shape's rule
    assert rate("innet") == round(0.1 * 0.8, 3)
    fidelity.save_shape_calibration("fattree-k8-w128-ps", {"ceiling_mbps": 0.04, "workers": 128,
                                                           "shape": {"topology": "fattree", "scheme": "ps"}})
    assert rate("hosts") == round(0.04 * 0.8, 3)                      # the lower of ring's and ps's
    assert rate("innet") == round(0.1 * 0.8, 3)


# -- end to end: more workers than one switch's bitmap ---------------------------------------
@pytest.mark.root
@pytest.mark.mininet
@pytest.mark.slow
@pytest.mark.net_timeout(240)
def test_64_workers_on_a_k8_fat_tree_are_exact():
    """Twice one switch's bitmap on 80 software switches (about 20 s here, loaded); each rank
    reports what it cost to start and to hold."""
    from agglab.emulation.session import run_allreduce
    from tests.leftovers import assert_clean

    r = run_allreduce(topology="fattree", k=8, workers=64, tree="rat", elements=2 * wire.K + 5, seed=3)
    assert r["exact"], r.get("errors")
    assert r["workers"] == 64 > wire.MAX_WORKERS
    assert r["worker_start_cpu_s"] > 0 and r["worker_pss_mb"] > 0 and r["worker_rss_mb"] > 0
    assert_clean()


def test_the_analytic_time_counts_each_slots_lead_frame():
    """Round 0 of every slot carries no block: with as many slots as blocks the frames double."""
    K, rate = wire.K, 0.5
    per_frame = wire.FRAME_BYTES * 8 / (rate * 1e6)
    assert fidelity.dense_link_seconds(128 * K, rate) == pytest.approx(128 * per_frame)
    # float32 leads on every slot: S = min(window, blocks) lead frames
    assert fidelity.dense_link_seconds(128 * K, rate, window=128, dtype="float32") == pytest.approx(256 * per_frame)
    assert fidelity.dense_link_seconds(1000 * K - 3, rate, window=16, dtype="float32") == pytest.approx(1016 * per_frame)
    assert fidelity.dense_link_seconds(5 * K, rate, window=128, dtype="float32") == pytest.approx(10 * per_frame)
    # int32 leads on slot 0 only: one lead frame whatever the window
    assert fidelity.dense_link_seconds(128 * K, rate, window=128) == pytest.approx(129 * per_frame)
    assert fidelity.dense_link_seconds(1000 * K - 3, rate, window=16) == pytest.approx(1001 * per_frame)
