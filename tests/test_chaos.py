"""The seeded fault schedule (emulation/chaos.py): drawn deterministically, and through Mininet
a handful of seeds of a two-job run on a k=4 fat-tree, each job exact or cleanly partitioned,
every fault undone and nothing left behind. `make bench` (chaos section) runs 20 seeds."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from agglab.controller import topologies
from agglab.controller.addressing import assign_addresses
from agglab.emulation.chaos import KINDS, draw
from agglab.ground.runspec import RunSpec, only_edge_switches


def _fat():
    return assign_addresses(topologies.build("fattree", k=4, workers=8))


def test_a_seed_draws_the_same_schedule_and_seeds_differ():
    g = _fat()
    assert draw(5, g) == draw(5, g)
    assert len({tuple(draw(s, g)) for s in range(10)}) == 10
    faults = [f for s in range(50) for f in draw(s, g)]
    assert {f.kind for f in faults} == set(KINDS)
    assert all(0.05 <= f.at <= 0.8 for f in faults)
    for f in faults:
        if f.kind in ("link_flap", "loss_burst"):
            a, b = f.link()
            assert g.nodes[a]["kind"] == g.nodes[b]["kind"] == "switch"
            assert f.kind == "link_flap" or 0.02 <= f.loss <= 0.2
        else:
            assert g.nodes[f.target]["kind"] == "switch"
    kills = [f for f in faults if f.kind in ("switch_kill", "switch_hang")]
    edge = sum(f.target in only_edge_switches(g) for f in kills)
    assert 0 < edge < len(kills) / 2          # mostly switches whose loss reroutes, some that partition


@pytest.mark.parametrize("changes,words", [
    (dict(chaos=1, fail=["tree@0.5"]), "draws its own faults"),
    (dict(chaos=1, algorithm="ring"), "--chaos"),
])
def test_chaos_refuses_what_it_cannot_run(changes, words):
    with pytest.raises(ValueError, match=words):
        RunSpec(topology="fattree", k=4, workers=4, **changes).validate()


def _ok_or_partitioned(job: dict) -> bool:
    return job["exact"] or (job.get("errors") and all("partition" in e.lower() for e in job["errors"]))


@pytest.mark.root
@pytest.mark.mininet
@pytest.mark.slow
@pytest.mark.net_timeout(600)
def test_a_handful_of_chaos_seeds_on_two_jobs_each_exact_or_cleanly_partitioned():
    from agglab.emulation.session import Session
    from tests.leftovers import assert_clean

    spec = RunSpec(topology="fattree", k=4, workers=4, jobs=2, elements=60_000, seed=2, give_up=20)
    outcomes = []
    with Session(spec) as s:
        for seed in (1, 2, 3, 4):
            r = s.allreduce(chaos=seed)
            assert all(_ok_or_partitioned(j) for j in r["jobs"]), (seed, r["jobs"], r["failures"])
            c = r["chaos"]
            assert c["left"] == {"switches_down": [], "links_down": [], "restore_errors": []}, (seed, c)
            assert len(r["failures"]) == len(c["faults"]) == 4
            for f in r["failures"]:
                assert "skipped" in f or f["restored_ms"] >= 0, f
                if f["kind"] in ("switch_kill", "switch_hang", "link_flap") and f.get("on_tree"):
                    assert f["detect_ms"] is not None and f["detect_ms"] >= 0, f
            outcomes.append("exact" if r["exact"] else "partitioned")
    assert "exact" in outcomes, outcomes
    assert_clean()


class _Net:
    """Takes links down and up by recording them (a fake of EmulatedNetwork's two calls)."""

    def __init__(self):
        self.dead: set[str] = set()
        self.calls: list[tuple[str, str, bool]] = []

    def set_link(self, a: str, b: str, up: bool) -> float:
        self.calls.append((a, b, up))
        return 100.0


def test_a_fault_reports_the_progress_reading_that_struck(monkeypatch):
    """`at` is the reading that crossed the fault's share, not a second one: a second read can
    meet a progress file mid-rewrite and give 0 (FailureInjector did, at 128 workers)."""
    import networkx as nx

    from agglab.emulation import chaos

    readings = iter([0.2, 0.6])              # below the fault's 0.5, then past it
    monkeypatch.setattr(chaos, "read_progress", lambda files: next(readings, 0.0))   # then mid-rewrite: 0
    g = nx.Graph()
    g.add_edge("e1", "a1")
    seen = SimpleNamespace(of_kind=lambda kind: [(100.0, {"link": "e1-a1"})])    # the job saw it go down
    session = type("Session", (), {"net": _Net(), "group": SimpleNamespace(events=seen), "g": g})()
    injector = chaos.Chaos(session, [chaos.Fault("link_flap", 0.5, "e1-a1", 0)], [], seed=0)
    injector.run()                           # in this thread: strikes, then undoes at the end
    (row,) = injector.rows
    assert row["at"] == 0.6 and row["planned_at"] == 0.5
    assert session.net.calls == [("e1", "a1", False), ("e1", "a1", True)]
