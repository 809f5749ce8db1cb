"""The `scale` suite at CI's shape: every series of `agglab experiment scale`
(experiments/configs/scale.yaml: switchml, omnireduce overlap and random at density 0.1, atp
with 2 jobs, ring and ps, the in-network ones again with a link failing half-way) on a k=4
fat-tree with all 16 hosts on shaped links, each exact.

Why the suite's own series: the full suite runs them on the k=8 fat-tree with 128 workers,
which takes far longer than CI may; reading the same definitions here means a scheme added
to the suite is tested at the small shape without a second list. What stays of the full
shape: every host a worker, links shaped (so the agents' timers come from their rates:
tests/test_path_timers.py), a failure during the run. Link-boundedness is the full run's
verdict (docs/guide/scale.md): a 2-core CI machine beside other jobs cannot promise it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from agglab.experiments.definition import RUN_FIELDS
from agglab.experiments.runner import load_suite
from agglab.ground import wire
from agglab.ground.runspec import RunSpec

SUITE = Path(__file__).resolve().parent.parent / "experiments" / "configs" / "scale.yaml"
HOSTS = 16                    # a k=4 fat-tree's every host
RATE_MBPS = 5.0               # the default ceiling: the small shape's links
BLOCKS = 64                   # blocks a worker: a failure at half of them lands mid-run


def _points() -> list[tuple[str, dict]]:
    """(id, the run's fields) of every series point of the suite, at the small shape."""
    out = []
    for d in load_suite(SUITE).definitions:
        for combo in d.combos():
            for label, over in d.series.items():
                fields = {k: v for k, v in {**d.run, **combo, **over}.items() if k in RUN_FIELDS}
                jobs = int(fields.get("jobs", 1))
                fields.update(topology="fattree", k=4, workers=HOSTS // jobs, bw=RATE_MBPS,
                              elements=BLOCKS * wire.K, seed=1)
                name = "-".join([d.name.removeprefix("scale_"), label, *(str(v) for k, v in combo.items()
                                                                            if k != "workers")])
                out.append((name, fields))
    return out


POINTS = _points()


def test_the_suite_covers_every_scheme_and_fails_each_in_network_one():
    """The issue's list: a test of the list itself, so a series dropped from the suite fails here."""
    seen = {(f["algorithm"], f.get("pattern"), bool(f.get("fail"))) for _, f in POINTS}
    for algorithm, pattern in (("switchml", None), ("omnireduce", "overlap"), ("omnireduce", "random"),
                               ("atp", None)):
        assert {(algorithm, pattern, False), (algorithm, pattern, True)} <= seen, (algorithm, pattern)
    assert {("ring", None, False), ("ps", None, False)} <= seen
    assert all(f.get("density") == 0.1 for _, f in POINTS if f["algorithm"] == "omnireduce")
    assert [f.get("jobs") for _, f in POINTS if f["algorithm"] == "atp"] == [2, 2]


@pytest.mark.scale
@pytest.mark.root
@pytest.mark.mininet
@pytest.mark.net_timeout(240)
@pytest.mark.parametrize("fields", [f for _, f in POINTS], ids=[n for n, _ in POINTS])
def test_every_scheme_is_exact_on_a_fat_tree_with_every_host_a_worker(fields):
    from agglab.emulation.session import run_spec
    from tests.leftovers import assert_clean

    r = run_spec(RunSpec(**fields))
    assert r["exact"], r.get("errors")
    assert all(j["exact"] for j in r.get("jobs") or []), r.get("jobs")
    if fields.get("fail"):
        assert len(r["failures"]) == 1 and not r["failures"][0].get("partitioned"), r["failures"]
        assert r["failures"][0]["left_ms"] > 0, r["failures"]     # it landed before the allreduce ended
    assert_clean()
