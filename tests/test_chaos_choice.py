"""emulation/chaos.py: a chaos schedule is ready before the start gate, as `--fail tree@F` is.

Why: whatever is done after the progress reaches a fault's fraction delays its strike, and
at 128 workers a `tree@0.5` failure whose link was chosen after the trigger landed after a
1.3 s allreduce had ended (docs/measurements.md, 2026-12-07 eighth session). The chaos
injector was made and started only after the gate had opened (and the fidelity probe begun),
and the workers did not write the update reaching a fault's fraction at once. A fake network
and session: the test drives the progress files and sees, through the injector's own calls,
what struck and at which reading; no clock is read.
"""

from __future__ import annotations

import networkx as nx
import pytest

from agglab.emulation import chaos, workers
from agglab.emulation.chaos import Chaos, Fault
from agglab.ground import progress
from agglab.ground.runspec import RunPlan, RunSpec, WorkerSeat
from agglab.hosts.communicator import Communicator
from agglab.testkit.waits import wait_until
from progress_polls import count_polls, report

class FakeNet:
    """Links go down and up by being recorded (no moment returned, as Mininet's: the injector
    takes its own clock's, so the fault's hold runs from now)."""

    def __init__(self):
        self.dead: set[str] = set()
        self.changes: list[tuple[str, str, bool]] = []

    def set_link(self, a: str, b: str, up: bool) -> None:
        self.changes.append((a, b, up))


class FakeGroup:
    def live_switches(self) -> list[str]:
        return ["a1", "c1"]

    def failure_records(self) -> list[dict]:
        return []


class FakeSession:
    def __init__(self):
        self.net, self.group = FakeNet(), FakeGroup()
        self.g = nx.Graph()
        self.g.add_edge("a1", "c1")


@pytest.fixture
def polls(monkeypatch):
    return count_polls(monkeypatch, chaos)


def test_the_schedule_waits_before_the_gate_and_strikes_at_its_fraction(tmp_path, polls):
    session = FakeSession()
    fault = Fault("link_flap", 0.5, "a1-c1", 60_000)          # undone when the injector stops
    files = [tmp_path / f"rank{r}.progress" for r in range(3)]    # no worker has written one yet
    spec = RunSpec(topology="fattree", k=4, workers=4, chaos=7)
    injector = workers.scripted(session.net, spec, session.group, files,
                                lambda fs: Chaos(session, [fault], fs, 7))
    try:
        assert injector is not None and injector.is_alive()      # started before any worker is
        wait_until(lambda: polls[0] >= 2, what="the schedule waiting on the progress files")
        assert session.net.changes == [] and workers._marks(injector) == (0.5,)
        report(files, 30)
        seen = polls[0]
        wait_until(lambda: polls[0] >= seen + 2, what="the schedule reading 30%")
        assert session.net.changes == []
        report(files, 55)
        wait_until(lambda: session.net.changes, what="the strike")
        assert session.net.changes == [("a1", "c1", False)]
        (row,) = injector.rows
        assert row["at"] == 0.55 and row["planned_at"] == 0.5 and row["target"] == "a1-c1"
    finally:
        injector.stop()
        injector.join(5)
    assert session.net.changes == [("a1", "c1", False), ("a1", "c1", True)]    # whole again


def test_no_chaos_and_no_failure_starts_nothing(tmp_path):
    assert workers.scripted(None, RunSpec(topology="fattree", k=4, workers=4), None, [tmp_path / "r0"]) is None


def test_the_plans_marks_reach_the_workers_progress_file(tmp_path):
    """The fractions a chaos schedule strikes at travel in the run's plan (the spec has only its
    seed), and the worker's progress file writes the update that reaches one at once."""
    spec = RunSpec(workers=2).validate()
    seats = [WorkerSeat(rank=r, local_ip=f"10.0.0.{r + 1}", out=str(tmp_path / f"rank{r}"),
                        progress=str(tmp_path / f"rank{r}.progress")) for r in range(2)]
    plan = RunPlan.read(RunPlan(spec, "10.0.0.254", 16, None, seats, (0.3, 0.6)).write(tmp_path / "run.json"))
    assert plan.marks == (0.3, 0.6)
    assert Communicator(plan, 0, transport=object())._progress.marks == [0.3, 0.6]
