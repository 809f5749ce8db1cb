"""emulation/failures.py: a `tree@F` failure's link or switch is chosen before its trigger.

Why: at 128 workers choosing (which tree link or switch would partition no worker) took
0.8-1.0 s of the injector's process, and done after the progress reached F it let a 1.3 s
OmniReduce allreduce end before the link went down (docs/measurements.md, 2026-12-07 eighth
session). A fake network and job: the test drives the progress files and sees, through the
injector's own calls, what it chose and when; no clock is read.
"""

from __future__ import annotations

import pytest

from agglab.emulation import failures
from agglab.emulation.failures import FailureInjector
from agglab.ground.runspec import FailSpec, SwitchFailSpec
from agglab.testkit.waits import wait_until
from progress_polls import count_polls, report

T_FAIL = 100.0                   # what the fake network says the failure's moment was


class FakeEvents:
    def __init__(self):
        self.seen: dict[str, list] = {}

    def of_kind(self, kind: str) -> list:
        return list(self.seen.get(kind, []))


class FakeNet:
    """Takes links down and kills switches by recording them; the link monitor's event is
    there at once (the injector waits for it after a link change)."""

    def __init__(self, events: FakeEvents):
        self.events, self.down = events, []

    def set_link(self, a: str, b: str, up: bool) -> float:
        self.down.append(("link", a, b))
        self.events.seen.setdefault("link_down", []).append((T_FAIL, {"link": f"{a}-{b}"}))
        return T_FAIL

    def kill_switch(self, name: str) -> float:
        self.down.append(("switch", name))
        return T_FAIL

    def host(self, name: str):
        raise KeyError(name)         # no Mininet shells to raise


class FakeJob:
    """Chooses the links and switches in the order given, noting the progress at each choice."""

    def __init__(self, files, links, switches):
        self.files, self.links, self.switches = files, list(links), list(switches)
        self.choices: list[float] = []            # the slowest worker's progress at each choice
        self.records: list[dict] = []             # failures that rerouted the trees
        self.events = FakeEvents()

    def pick_tree_link(self, seed: int) -> tuple[str, str]:
        self.choices.append(failures.read_progress(self.files))
        return self.links.pop(0)

    def pick_tree_switch(self, seed: int) -> str:
        self.choices.append(failures.read_progress(self.files))
        return self.switches.pop(0)

    def failure_records(self) -> list[dict]:
        return list(self.records)


@pytest.fixture
def polls(monkeypatch):
    return count_polls(monkeypatch, failures)


def _start(tmp_path, spec, links=(("a1", "c1"), ("a2", "c2")), switches=("a3", "a4")):
    files = [tmp_path / f"rank{r}.progress" for r in range(3)]
    report(files, 10)
    job = FakeJob(files, links, switches)
    net = FakeNet(job.events)
    injector = FailureInjector(net, job, [spec], files, seed=0)
    injector.start()
    return files, job, net, injector


@pytest.mark.parametrize("spec,taken", [
    (FailSpec(0.5, None), ("link", "a1", "c1")),
    (SwitchFailSpec(0.5, None), ("switch", "a3")),
])
def test_tree_target_is_chosen_while_waiting_for_the_trigger(tmp_path, polls, spec, taken):
    files, job, net, injector = _start(tmp_path, spec)
    try:
        wait_until(lambda: polls[0] >= 2, what="the injector waiting on the progress files")
        assert job.choices == [0.1] and net.down == []     # chosen before the trigger, nothing down yet
        report(files, 60)
        wait_until(lambda: net.down, what="the failure")
        assert net.down == [taken] and job.choices == [0.1]    # not chosen again at the trigger
        (row,) = injector.report(last_end=T_FAIL + 1.25)
        assert row["at"] == 0.6 and row["left_ms"] == 1250.0
    finally:
        injector.stop()
        injector.join(5)


def test_a_reroute_before_the_trigger_means_choosing_again(tmp_path, polls):
    files, job, net, injector = _start(tmp_path, FailSpec(0.5, None))
    try:
        wait_until(lambda: polls[0] >= 2, what="the injector waiting on the progress files")
        job.records.append({"link": "x-y", "epoch": 1})    # another failure moved the trees
        wait_until(lambda: len(job.choices) == 2, what="a second choice")
        report(files, 50)
        wait_until(lambda: net.down, what="the failure")
        assert net.down == [("link", "a2", "c2")]
    finally:
        injector.stop()
        injector.join(5)


def test_a_named_link_is_not_chosen(tmp_path, polls):
    files, job, net, injector = _start(tmp_path, FailSpec(0.3, ("e1", "a1")))
    try:
        report(files, 30)
        wait_until(lambda: net.down, what="the failure")
        assert net.down == [("link", "e1", "a1")] and job.choices == []
        (row,) = injector.report(last_end=T_FAIL - 0.5)           # it landed after the end
        assert row["left_ms"] == -500.0
    finally:
        injector.stop()
        injector.join(5)
