"""Scripted failures during an allreduce: links (`--fail A-B@0.5`, `--fail tree@0.5`) and
switches (`--fail-switch a1@0.5`, `--fail-switch tree@0.5`: the switch's process is killed).

Why progress-triggered: a failure "when half the blocks are done" lands mid-allreduce
whatever the speed of the machine. Progress is the slowest worker's share of blocks
done, read from the small progress files the workers rewrite as they go (a sparse
OmniReduce worker's: its settled blocks, zero blocks included; at 128 workers that share
crossed 50% at 46-50% of the run, where its own rounds' results crossed at 22% with random
blocks: docs/measurements.md, 2026-12-07 eighth session).

Why `tree@F`'s link or switch is chosen before the trigger: choosing it (pick_tree_link,
pick_tree_switch: which candidate would partition the workers) took 0.8-1.0 s of this
process at 128 workers on a k=8 fat-tree, and done after the trigger it let a 1.3 s
OmniReduce allreduce end before the link went down. The injector starts before the
start gate, chooses then, and chooses again only if a failure rerouted the trees since.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

from agglab.ground import progress
from agglab.ground.priority import urgent
from agglab.ground.runspec import FailSpec, SwitchFailSpec
from agglab.controller.reroute.record import REROUTE_PHASES


def read_progress(files: list[Path]) -> float:
    """The slowest worker's fraction done (0 until every worker has reported)."""
    fractions = []
    for f in files:
        reported = progress.read(f)
        if reported is None:
            return 0.0
        done, total = reported
        fractions.append(done / max(1, total))
    return min(fractions) if fractions else 0.0


class FailureInjector(threading.Thread):
    """Takes links down (EmulatedNetwork.set_link, as Mininet's `link a b down`) and kills
    switches (EmulatedNetwork.kill_switch, as `kill -9`) on schedule."""

    def __init__(self, net, job, specs: list[FailSpec | SwitchFailSpec], progress_files: list[Path],
                 seed: int = 0):
        super().__init__(name="failure-injector", daemon=True)
        self.net, self.job, self.specs = net, job, sorted(specs, key=lambda s: s.at)
        self.progress_files, self.seed = progress_files, seed
        self.injected: list[dict] = []
        self.stop_event = threading.Event()

    def run(self) -> None:
        for i, spec in enumerate(self.specs):
            picked = (spec.switch if isinstance(spec, SwitchFailSpec) else spec.link) is None   # tree@F
            target, seen = self._choose(spec, i), self._reroutes(picked)
            while (done := read_progress(self.progress_files)) < spec.at:
                if self.stop_event.wait(0.005):
                    return
                if self._reroutes(picked) != seen:    # the trees moved meanwhile: choose on the new ones
                    target, seen = self._choose(spec, i), self._reroutes(picked)
            # the reading that fired: a second one can meet a file mid-rewrite and read 0 (it
            # did, 1 in 128 files, at 128 workers: `at` 0.0 for a failure that fired at 0.5)
            at = round(done, 3)
            if self._reroutes(picked) != seen:
                target = self._choose(spec, i)
            if isinstance(spec, SwitchFailSpec):
                name = target
                if spec.hang:
                    self.injected.append({"switch": name, "t_fail": self.net.hang_switch(name), "at": at,
                                          "hung": True})
                else:
                    self.injected.append({"switch": name, "t_fail": self.net.kill_switch(name), "at": at})
                continue
            a, b = target
            self.injected.append({"link": f"{a}-{b}", "t_fail": self._link_down(a, b), "at": at})

    def _link_down(self, a: str, b: str) -> float:
        """Take link a-b down, its ends' shells and this process raised until the job has seen
        it (_shells, _until_seen); returns the moment it went down. Chaos's link flaps take
        this way too: a strike at the default priority waits its turn behind the busy sessions
        as a `--fail` did."""
        with urgent([*self._shells(a, b), os.getpid()], own=False):
            t_fail = time.monotonic()
            t_fail = self.net.set_link(a, b, False) or t_fail    # BMv2: after its port change
            self._until_seen(a, b, t_fail)
        return t_fail

    def _choose(self, spec: FailSpec | SwitchFailSpec, i: int):
        """What failure i takes down: the switch's name, or the link (a, b)."""
        if isinstance(spec, SwitchFailSpec):
            return spec.switch or self.job.pick_tree_switch(self.seed + i)
        return spec.link or self.job.pick_tree_link(self.seed + i)

    def _reroutes(self, picked: bool) -> int:
        """How many failures have rerouted the jobs' trees so far (0 for a named link or
        switch, which does not depend on the trees)."""
        return len(self.job.failure_records()) if picked else 0

    def _until_seen(self, a: str, b: str, t_fail: float, limit: float = 0.2) -> None:
        """Until the job has seen the link go down (its `link_down` event; at most `limit` s).
        Meanwhile this process's session is raised too: a thread of it (the fidelity probe
        samples /proc for ~3 ms every 0.1 s, up to 26 ms when preempted) may hold the GIL the
        link monitor's real-time thread needs to report the failure, and at the default
        priority that thread waited its turn behind ~30 busy sessions. Once the job reroutes,
        its own threads are real-time (ground/priority.py)."""
        end = time.monotonic() + limit
        while time.monotonic() < end and not any(
                t >= t_fail and set(info["link"].split("-")) == {a, b} for t, info in self.job.events.of_kind("link_down")):
            if self.stop_event.wait(0.001):
                return

    def _shells(self, *nodes: str) -> list[int]:
        """The Mininet shells that take a link's ends down (`ifconfig`, one after the other):
        raised while they do (ground/priority.py), since detect_ms runs from the moment the
        first is asked, and at the default priority a shell waits its turn behind ~30 busy
        sessions first (with the link monitor's thread real-time too, detect_ms went from
        2-25 ms to 2-5 ms on the loaded 2-core machine, k=4 fat-tree, unshaped links)."""
        pids = []
        for n in nodes:
            try:
                pid = getattr(self.net.host(n), "pid", None)
            except (AttributeError, KeyError):
                pid = None
            if pid:
                pids.append(pid)
        return pids

    def stop(self) -> None:
        self.stop_event.set()

    def report(self, last_end: float | None = None) -> list[dict]:
        """Per failure: link, detect/recompute/install times in ms (None if not on a tree).
        With `last_end` (the last worker's end, on this machine's monotonic clock): `left_ms`,
        how much of the allreduce was left when the failure landed (negative: it landed after)."""
        out = []
        for inj in self.injected:
            if "switch" in inj:
                out.append(_left(self._switch_row(inj), inj, last_end))
                continue
            a, b = inj["link"].split("-")
            recs = [f for f in self.job.failure_records()
                    if "link" in f and set(f["link"].split("-")) == {a, b} and f["t_detect"] >= inj["t_fail"]]
            rec = recs[0] if recs else None
            row = {"link": inj["link"], "at": inj["at"], "on_tree": rec is not None,
                   "detect_ms": None, "recompute_ms": None, "install_ms": None}
            if rec:
                row.update(detect_ms=round((rec["t_detect"] - inj["t_fail"]) * 1e3, 2),
                           recompute_ms=rec.get("recompute_ms"), install_ms=rec.get("install_ms"),
                           epoch=rec.get("epoch"), partitioned=rec.get("partitioned", False),
                           **{k: rec[k] for k in REROUTE_PHASES if k in rec})
                _per_job(row, recs, inj["t_fail"])
            else:
                seen = [t for t, info in self.job.events.of_kind("link_down")
                        if set(info["link"].split("-")) == {a, b} and t >= inj["t_fail"]]
                if seen:
                    row["detect_ms"] = round((seen[0] - inj["t_fail"]) * 1e3, 2)
            out.append(_left(row, inj, last_end))
        return out

    def _switch_row(self, inj: dict) -> dict:
        """A killed switch: when the controller saw the process exit (detect), how long the
        trees took to recompute and install (None when no active tree used it). A hung one
        (`hung`): detect is when the liveness probe declared it hung, from the SIGSTOP."""
        name = inj["switch"]
        recs = [f for f in self.job.failure_records() if f.get("switch") == name and f["t_detect"] >= inj["t_fail"]]
        rec = recs[0] if recs else None
        row = {"switch": name, "at": inj["at"], "on_tree": rec is not None, "detect_ms": None,
               "recompute_ms": None, "install_ms": None, **({"hung": True} if inj.get("hung") else {})}
        seen = [t for t, info in self.job.events.of_kind("switch_down")
                if info.get("switch") == name and t >= inj["t_fail"]]
        if seen:
            row["detect_ms"] = round((seen[0] - inj["t_fail"]) * 1e3, 2)
        if rec:
            row.update(recompute_ms=rec.get("recompute_ms"), install_ms=rec.get("install_ms"),
                       epoch=rec.get("epoch"), partitioned=rec.get("partitioned", False),
                       **{k: rec[k] for k in REROUTE_PHASES + ("entries_changed",) if k in rec})
            _per_job(row, recs, inj["t_fail"])
        return row


def _left(row: dict, inj: dict, last_end: float | None) -> dict:
    """The row with `left_ms` when the run's end is known: a failure meant to land mid-run
    that lands after the last worker finished tested nothing (the 128-worker OmniReduce rows
    of 2026-12-07 were exact for that reason)."""
    if last_end is not None:
        row["left_ms"] = round((last_end - inj["t_fail"]) * 1e3, 1)
    return row


def _per_job(row: dict, recs: list[dict], t_fail: float) -> None:
    """With several jobs (their records name their `job`): each rerouted job's own figures under
    `jobs` (one failure, every job whose trees used the link or switch), and the row's times
    the slowest job's: the failure is over when the last job has rerouted."""
    if not any("job" in r for r in recs):
        return
    row["jobs"] = [{"job": r["job"], "epoch": r.get("epoch"), "partitioned": r.get("partitioned", False),
                    "detect_ms": round((r["t_detect"] - t_fail) * 1e3, 2), "recompute_ms": r.get("recompute_ms"),
                    "install_ms": r.get("install_ms"),
                    # from the failure to this job's new epoch published: the jobs reroute one after another
                    "recovered_ms": round((r["t_recovered"] - t_fail) * 1e3, 2) if "t_recovered" in r else None}
                   for r in recs]
    row["partitioned"] = any(j["partitioned"] for j in row["jobs"])


def hang_rows(net, job) -> list[dict]:
    """Every switch the liveness probe declared hung during the run, scripted or not: how
    long it had been silent when declared (`silent_ms`, at most the probe's bound plus its
    interval after it stopped), what its process was doing then (`state`: "stopped" for a
    SIGSTOP; "running" or "sleeping" is a live or wedged switch) and the reroute's recompute and install times (the slowest
    job's, with several jobs: `jobs` lists the jobs that rerouted)."""
    rows = []
    for h in net.hang_log:
        recs = [f for f in job.failure_records()
                if f.get("switch") == h["switch"] and f["t_detect"] >= h["t_detect"] - 1e-6]
        slowest = max(recs, key=lambda f: f.get("install_ms") or 0, default=None)
        row = {"switch": h["switch"], "silent_ms": round((h["t_detect"] - h["t_last_answer"]) * 1e3, 1),
               "state": h.get("state"),
               "on_tree": bool(recs), "recompute_ms": slowest.get("recompute_ms") if slowest else None,
               "install_ms": slowest.get("install_ms") if slowest else None,
               "partitioned": any(f.get("partitioned", False) for f in recs)}
        if any("job" in f for f in recs):
            row["jobs"] = sorted(f["job"] for f in recs)
        rows.append(row)
    return rows


def late_rows(net, since: int = 0) -> list[dict]:
    """Every switch the liveness probe declared hung that then answered the second ping
    (emulation/switch_failures.py: "Late is not hung"): kept, not fenced. `silent_ms`: from its
    last answer to the probe's verdict; `answered_ms`: to the answer that kept it."""
    return [{"switch": r["switch"], "silent_ms": round((r["t_detect"] - r["t_last_answer"]) * 1e3, 1),
             "answered_ms": round((r["t_answer"] - r["t_last_answer"]) * 1e3, 1)}
            for r in net.late[since:]]
