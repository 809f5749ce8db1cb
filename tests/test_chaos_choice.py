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

import os
import subprocess
import sys
import time
from types import SimpleNamespace

import networkx as nx
import pytest

from agglab.emulation import chaos, workers
from agglab.emulation.chaos import Chaos, Fault
from agglab.ground import progress
from agglab.ground.priority import URGENT_NICE
from agglab.ground.runspec import RunPlan, RunSpec, WorkerSeat
from agglab.hosts.communicator import Communicator
from agglab.testkit.waits import wait_until
from progress_polls import count_polls, report

class FakeNet:
    """Links go down and up by being recorded (no moment returned, as Mininet's: the injector
    takes its own clock's, so the fault's hold runs from now), with the niceness the nodes'
    shells had at that moment (`shells`: node -> pid, none by default)."""

    def __init__(self, shells: dict[str, int] | None = None):
        self.dead: set[str] = set()
        self.changes: list[tuple[str, str, bool]] = []
        self.shells = shells or {}
        self.nice_then: list[dict[str, int]] = []
        self.down_at: list[tuple[float, dict]] = []

    def host(self, name: str):
        return SimpleNamespace(pid=self.shells[name])

    def set_link(self, a: str, b: str, up: bool) -> None:
        self.changes.append((a, b, up))
        self.nice_then.append({n: os.getpriority(os.PRIO_PROCESS, pid) for n, pid in self.shells.items()})
        if not up:        # the link monitor's report, as the job's event log would hold it
            self.down_at.append((time.monotonic(), {"link": f"{a}-{b}"}))


class FakeEvents:
    def __init__(self, net: FakeNet):
        self.net = net

    def of_kind(self, kind: str) -> list[tuple[float, dict]]:
        return list(self.net.down_at) if kind == "link_down" else []


class FakeGroup:
    def __init__(self, net: FakeNet):
        self.events = FakeEvents(net)

    def live_switches(self) -> list[str]:
        return ["a1", "c1"]

    def failure_records(self) -> list[dict]:
        return []


class FakeSession:
    def __init__(self, shells: dict[str, int] | None = None):
        self.net = FakeNet(shells)
        self.group = FakeGroup(self.net)
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


@pytest.mark.root
def test_a_link_flap_raises_the_links_shells_as_a_scripted_failure_does(tmp_path):
    """A chaos link flap is taken down as `--fail A-B@F` takes a link down: the shells of its
    two ends (stand-ins here: child processes that wait on their stdin) at URGENT_NICE while
    they do, and back to their niceness afterwards (ground/priority.py: at the default
    priority the strike waited its turn behind ~30 busy sessions). Before, a flap's shells
    kept niceness 0."""
    kids = [subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
            for _ in range(2)]
    try:
        session = FakeSession({"a1": kids[0].pid, "c1": kids[1].pid})
        files = [tmp_path / f"rank{r}.progress" for r in range(2)]
        report(files, 100)
        injector = Chaos(session, [Fault("link_flap", 0.5, "a1-c1", 60_000)], files, 7)
        injector.start()
        try:
            wait_until(lambda: session.net.changes, what="the strike")
        finally:
            injector.stop()
            injector.join(5)
        assert session.net.changes == [("a1", "c1", False), ("a1", "c1", True)]
        assert session.net.nice_then[0] == {"a1": URGENT_NICE, "c1": URGENT_NICE}     # raised while it went down
        assert {n: os.getpriority(os.PRIO_PROCESS, k.pid) for n, k in zip(("a1", "c1"), kids)} == {"a1": 0, "c1": 0}
    finally:
        for k in kids:
            k.stdin.close()
            k.wait(10)
