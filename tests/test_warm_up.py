"""Every network an experiment builds runs a small untimed allreduce before its timed ones.

Why: a fresh BMv2 switch's first packets grow its pipeline threads' malloc arenas, a cost no
later run in that network pays (the first OmniReduce call at density 0.01 took 2-3x the
second, with resends, and was flagged CPU-bound). The warm-up must not change the network
(no failure, chaos or compute), and each timed point must get it alike, in a shared network
or a fresh one. No network is built here: the session is a recording stand-in.
"""

from __future__ import annotations

from dataclasses import replace

import agglab.emulation.session as session_mod
from agglab.emulation.session import warm_up_overrides
from agglab.experiments.runner import default_run_fn
from agglab.ground import wire
from agglab.ground.runspec import RunSpec


def test_the_warm_up_keeps_the_scheme_and_window_and_drops_every_fault():
    spec = RunSpec(workers=8, elements=220160, algorithm="omnireduce", density=0.01, pattern="overlap",
                   window=16, backend="bmv2", bw=1.05, fail=["s1-h1@0.5"], chaos=7, iterations=3, compute_ms=5.0)
    over = warm_up_overrides(spec)
    warm = replace(spec, **over)
    warm.validate()
    assert warm.elements == 16 * wire.K * 4          # four rounds of each of the 16 slots
    assert warm.default_window() == 16
    assert (warm.algorithm, warm.backend, warm.bw, warm.workers) == ("omnireduce", "bmv2", 1.05, 8)
    assert warm.density == 1.0
    assert (warm.fail, warm.fail_switch, warm.hang_switch, warm.chaos) == ([], [], [], None)
    assert (warm.iterations, warm.compute_ms) == (1, None)


class _Recorder:
    calls: list = []

    def __init__(self, spec, **_):
        self.spec = spec

    def __enter__(self):
        _Recorder.calls.append("build")
        return self

    def __exit__(self, *exc):
        _Recorder.calls.append("teardown")

    @property
    def events(self):
        return self

    def lines(self):
        return []

    def warm_up(self):
        _Recorder.calls.append("warm_up")
        return {"ok": True, "seconds": 0.5, "elements": 4096, "retransmissions": 3}

    def allreduce(self, **over):
        _Recorder.calls.append(("allreduce", over.get("seed")))
        return {"ok": True, "seconds": 1.0}


def test_a_shared_network_is_warmed_once_before_its_repeats(monkeypatch):
    monkeypatch.delenv("AGGLAB_NET_LOCK", raising=False)
    monkeypatch.setattr(session_mod, "Session", _Recorder)
    _Recorder.calls = []
    base = RunSpec(workers=8, elements=220160, algorithm="omnireduce", density=0.01, pattern="overlap")
    rows = list(default_run_fn()([replace(base, seed=0), replace(base, seed=1)]))
    assert _Recorder.calls == ["build", "warm_up", ("allreduce", 0), ("allreduce", 1), "teardown"]
    assert rows[0]["warm_up"] == {"ok": True, "seconds": 0.5, "elements": 4096, "retransmissions": 3}
    assert "warm_up" not in rows[1]


def test_a_fresh_network_is_warmed_too(monkeypatch):
    monkeypatch.delenv("AGGLAB_NET_LOCK", raising=False)
    asked = []
    monkeypatch.setattr(session_mod, "run_spec", lambda spec, **kw: asked.append(kw) or {"ok": True})
    list(default_run_fn()([RunSpec(workers=4, elements=1000, algorithm="ring")]))
    assert asked == [{"warm": True}]


def test_a_row_records_its_networks_warm_up():
    from agglab.experiments.runner import fill_row

    warm = {"ok": True, "seconds": 0.5, "elements": 4096, "retransmissions": 3}
    row = fill_row({}, {"ok": True, "seconds": 0.12, "warm_up": warm}, "", 1.0)
    assert row["warm_up"] == warm and row["seconds"] == 0.12
