"""The paper-scale suite: per-scale emulated sizes and ceilings, the oversubscribed fat-tree,
the plan and its dry run, each size's bound worked out by hand on a small fat-tree, and the
ratio-vs-scale table and plot from synthetic runs. No network is built here."""

from __future__ import annotations

import io
import json
import math
import re

import pytest
import yaml

from agglab.controller import topologies
from agglab.controller.topology_file import load as load_topology
from agglab.experiments import cli
from agglab.experiments.analysis import claim_bound
from agglab.experiments.definition import ConfigError
from agglab.experiments.definition_file import parse_definition
from agglab.experiments.runner import load_suite, plan
from agglab.ground import wire
from agglab.ground.paths import REPO

CONFIGS = REPO / "experiments" / "configs"
SHAPES = {"fattree-k8-w32-rat": 0.6, "fattree-k8-w128-rat": 0.1}     # Mb/s, as `agglab calibrate` stores them


@pytest.fixture(autouse=True)
def calibration(tmp_path, monkeypatch):
    """Two calibrated fat-tree shapes (32 and 128 workers) and no default record."""
    path = tmp_path / "calibration.json"
    path.write_text(json.dumps({"shapes": {k: {"ceiling_mbps": v, "workers": int(k.split("-w")[1].split("-")[0])}
                                           for k, v in SHAPES.items()}}))
    monkeypatch.setenv("AGGLAB_CALIBRATION", str(path))


def elements_by_hand(written_bytes: int, ceiling_mbps: float) -> int:
    """A size written for 5 Mb/s, shrunk by ceiling / 5 to whole blocks of K int32 values."""
    block = 4 * wire.K
    return int(written_bytes * ceiling_mbps / 5.0) // block * block // 4


# -- the suite as shipped ---------------------------------------------------------------------
def test_paper_suite_plans_every_trend_at_8_32_and_128_workers_at_each_sizes_own_ceiling(tmp_path):
    suite = load_suite(CONFIGS / "paper.yaml")
    assert [d.name for d in suite.definitions] == ["rat_scale", "rat_scale_failures", "packing_scale"]
    steps = plan(suite, tmp_path)
    for d in suite.definitions:
        assert d.plot == "scale" and d.x == "workers"
        points = [p for dd, p, _ in steps if dd is d]
        assert sorted({p.spec.workers for p in points}) == [8, 32, 128]
        assert all(p.spec.topology.endswith(".yaml") for p in points)       # a written fat-tree file
    mib = 1 << 20
    # 80% (the soft backend's headroom) of the smallest calibrated shape with at least that many workers:
    # 8 and 32 workers -> the 32-worker shape (0.6 Mb/s), 128 -> the 128-worker one (0.1 Mb/s)
    rat = {p.spec.workers: p for d, p, _ in steps if d.name == "rat_scale" and p.series == "rat"}
    # 5 MiB x 0.48 / 5 = 503,316 B: 1,966 blocks of 256 B (K=64) = 125,824 values, or
    # 491 blocks of 1,024 B (K=256) = 125,696 values
    assert rat[8].spec.elements == rat[32].spec.elements == elements_by_hand(5 * mib, 0.48) == {
        64: 125824, 256: 125696}[wire.K]
    assert rat[128].spec.elements == elements_by_hand(3 * mib, 0.08) == 12544
    assert rat[8].scale.link_mbps(100e9) == pytest.approx(0.48)
    assert rat[128].scale.link_mbps(100e9) == pytest.approx(0.08)
    packing = {p.spec.workers: p for d, p, _ in steps if d.name == "packing_scale" and p.series == "packing"}
    assert packing[32].spec.elements == elements_by_hand(2 * mib, 0.48)
    assert packing[128].spec.elements == elements_by_hand(1536 * 1024, 0.08)
    failing = [p for d, p, _ in steps if d.name == "rat_scale_failures"]
    assert all([f.link for f in p.spec.fail_specs] == [("a1", "c1"), ("a2", "c5")] for p in failing)


def test_paper_suite_networks_are_oversubscribed_and_span_10x(tmp_path):
    steps = plan(load_suite(CONFIGS / "paper.yaml"), tmp_path)
    by_trend = {d.name: p for d, p, _ in steps if p.spec.workers == 128}
    g = load_topology(by_trend["rat_scale"].spec.topology)
    host = {e["bw"] for u, v, e in g.edges(data=True) if "h" in (u[0], v[0])}
    core = {e["bw"] for u, v, e in g.edges(data=True) if "c" in (u[0], v[0])}
    assert len(host) == 1 and core == {host.pop() / 2}                 # agg-core at half the host rate
    g = load_topology(by_trend["packing_scale"].spec.topology)
    rates = [e["bw"] for _, _, e in g.edges(data=True)]
    assert max(rates) / min(rates) == pytest.approx(10)
    fabric = [e["bw"] for u, v, e in g.edges(data=True) if "h" not in (u[0], v[0])]
    assert len(fabric) == 256 and sum(1 for r in fabric if r < max(rates)) == 64      # a quarter of them


def test_dry_run_prints_the_plan_its_time_and_every_bound():
    log = io.StringIO()
    assert cli.main(["paper", "--dry-run"], log=log) == 0
    text = log.getvalue()
    head = text.splitlines()[0]
    assert head.startswith("paper: 3 trend(s), 21 runs, estimated ") and " min " in head
    assert "rat_scale: ps workers=128 x1 (~" in text
    assert "x int32 at 0.08 Mb/s, wire " in text and "x int32 at 0.48 Mb/s, wire " in text
    bounds = [line for line in text.splitlines() if line.startswith("  ") and ": paper " in line]
    assert len(bounds) == 12 and all(", bound " in b and "bound –" not in b for b in bounds)
    assert "rat_scale: PS / RAT, core oversubscribed 1:2 (workers=128): paper 25, bound " in text


# -- a small case by hand ---------------------------------------------------------------------
def small(**over) -> dict:
    d = {"name": "small", "network": {"link": "10Gbps", "gradient": "10MB"},
         "emulated": {"gradient": {2: "256KiB", 4: "128KiB"}}, "repeats": 1,
         "run": {"topology": "fattree", "k": 4, "dtype": "int32", "window": 16},
         "series": {"rat": {"algorithm": "switchml", "tree": "rat"}, "ring": {"algorithm": "ring"}},
         "sweep": {"workers": [2, 4]}, "x": "workers", "plot": "scale",
         "claims": [{"text": "ring / RAT", "for_each": "workers", "ratio": [{"series": "ring"}, {"series": "rat"}],
                     "paper": 5.7, "expect": "at_least"}]}
    d.update(over)
    return d


def test_each_size_has_its_own_size_rate_and_hand_computed_bound(tmp_path):
    """k=4 fat-tree, 2 and 4 workers (one per pod: pod-interleaved ranks), every link equal.
    RAT: each host link carries its blocks and one int32 lead frame up, in 14+20+8+16 B of
    headers around 4K B of values; the trees' links carry shares of that. Ring: each worker
    sends 2(n-1)/n of the gradient to the next pod in 1448 B TCP segments of 1514 B frames,
    one flow per link direction. The bound is ring / RAT on the host links, each less the
    6,000 B a link's full htb bucket sends at once at these rates (ground/links.py)."""
    d = parse_definition(small(), "small.yaml")
    ceilings = {2: 4.0, 4: 2.0}
    points = d.points(5.0, tmp_path, ceiling_of=ceilings.__getitem__)
    for n, written in ((2, 256 * 1024), (4, 128 * 1024)):
        rat = next(p for p in points if p.series == "rat" and p.spec.workers == n)
        assert rat.spec.bw == pytest.approx(ceilings[n])                  # 10 Gb/s -> this size's ceiling
        assert rat.spec.elements == elements_by_hand(written, ceilings[n])
        gradient = 4 * rat.spec.elements
        frame = 14 + 20 + 8 + 16 + 4 * wire.K
        rat_bytes = (math.ceil(rat.spec.elements / wire.K) + 1) * frame
        ring_bytes = 2 * (n - 1) / n * gradient * 1514 / 1448
        claim = next(c for c, vals in d.claims() if vals == {"workers": n})
        bound, why = claim_bound([], d, claim)
        bucket = 6000
        assert why == "" and bound == pytest.approx((ring_bytes - bucket) / (rat_bytes - bucket), rel=1e-9)


def test_per_scale_sizes_must_cover_every_worker_count(tmp_path):
    d = parse_definition(small(sweep={"workers": [2, 8]}), "small.yaml")
    with pytest.raises(ConfigError, match=r"emulated.gradient: has no size for 8 workers"):
        d.points(5.0, tmp_path)


@pytest.mark.parametrize("gradient,where", [({"eight": "1MiB"}, "emulated.gradient.eight"),
                                            ({}, "emulated.gradient"), ({2: "1 parsec"}, "network")])
def test_bad_per_scale_sizes_name_the_key(gradient, where):
    with pytest.raises(ConfigError, match=f"^small.yaml: {re.escape(where)}: ") as exc:
        parse_definition(small(emulated={"gradient": gradient}), "small.yaml")
    assert where in str(exc.value)


def test_fat_tree_core_oversubscription():
    g = topologies.fat_tree(4, bw=10.0, core_bw=2.5, workers=4)
    tiers = {n: g.nodes[n].get("tier", "host") for n in g}
    rates = {frozenset((tiers[u], tiers[v])): e["bw"] for u, v, e in g.edges(data=True)}
    assert rates == {frozenset(("agg", "core")): 2.5, frozenset(("edge", "agg")): 10.0,
                     frozenset(("host", "edge")): 10.0}
    assert g.graph["oversubscription"] == pytest.approx(4.0)
    assert topologies.fat_tree(4, bw=10.0).graph["oversubscription"] == pytest.approx(1.0)


# -- the report: ratio vs scale ---------------------------------------------------------------
def test_report_has_a_ratio_vs_scale_table_and_plot(tmp_path):
    path = tmp_path / "small.yaml"
    path.write_text(yaml.safe_dump(small(), sort_keys=False))

    def run_fn(specs):
        for s in specs:
            yield {"ok": True, "exact": True, "seconds": 3.0 if s.algorithm == "ring" else 1.0,
                   "fidelity": {"cpu_bound": False, "link_bound": True, "reason": "synthetic"}}

    out = tmp_path / "out"
    assert cli.main([str(path), "--out", str(out)], run_fn=run_fn) == 0
    folder = out / cli.results_name("small", wire.K)
    report = (folder / "report.md").read_text()
    assert "| claim | paper | workers=2: ours / bound | workers=4: ours / bound |" in report
    assert re.search(r"^\| ring / RAT \| 5\.7 \| 3 / [0-9.]+ \| 3 / [0-9.]+ \|$", report, re.M)
    assert (folder / "small-scale.png").stat().st_size > 0


def test_the_report_names_each_trends_own_rate_not_only_the_suites(tmp_path):
    """No default calibration here (5 Mb/s, the uncalibrated default), yet the paper trends
    ran at 80% of their shapes': 0.48 Mb/s at 8 and 32 workers, 0.08 at 128."""
    from agglab.experiments.report import render
    from agglab.experiments.runner import Outcome

    suite = load_suite(CONFIGS / "paper.yaml")
    text = render(Outcome(suite, tmp_path), {}, {})
    assert "| fastest emulated link (no trend ran at it) | 5 Mb/s — default 5 Mb/s: no calibration" in text
    for name in ("rat_scale", "rat_scale_failures"):
        assert (f"| fastest emulated link, {name} | 0.48 / 0.48 / 0.08 Mb/s at 8 / 32 / 128 workers "
                f"(80% of the calibrated shapes fattree-k8-w32-rat, fattree-k8-w128-rat) |") in text


def test_a_run_inside_a_held_turn_does_not_wait_for_it(tmp_path, monkeypatch):
    """A test holds AGGLAB_NET_LOCK while the suite it starts runs (tests/conftest.py says so
    with AGGLAB_NET_TURN_HELD): the runner's per-point turn must not wait for its own parent."""
    import fcntl
    import threading

    from agglab.experiments.runner import network_turn

    lock = tmp_path / "net.lock"
    monkeypatch.setenv("AGGLAB_NET_LOCK", str(lock))
    monkeypatch.setenv("AGGLAB_NET_TURN_HELD", "1")
    entered = threading.Event()

    def run():
        with network_turn():
            entered.set()

    with open(lock, "a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)            # another open file: a second flock would block
        t = threading.Thread(target=run, daemon=True)
        t.start()
        t.join(30)                                  # only a guard against a hang
        assert entered.is_set()
