"""Every aggregation job of one network, told of each failure once.

Why: the jobs of a network (`--jobs J`, tenants on shared switches) share one graph, in
which a failed link or dead switch is marked down so that every tree computation skips it.
Each job used to mark the graph itself and then react, so when the link monitor told a
second job of the same link it found the link already marked down and did nothing: only
one job could reroute. The group marks the graph once, logs the event once, and then
tells every job (`link_marked`, `switch_marked`), one after the other under all their
locks: each job whose trees use the link or switch reroutes (its own epoch, slots, carry),
the others log that it is not on their trees. One after the other because the jobs share
the switches' control sockets and a reroute holds the switches' ports while it runs.

The group offers what the session, the failure injector and the lab call on a job for
failures (link_changed, switch_changed, pick_tree_link, pick_tree_switch,
failure_records, live_switches, events), so a single job and several look the same.
"""

from __future__ import annotations

import random
from contextlib import ExitStack, contextmanager
from typing import Iterator

from agglab.controller.job_protocol import Job, _fan_in, _partitions_without, mark_switch, partitions
from agglab.controller.topology import mark_link, natural_key
from agglab.ground.runspec import only_edge_switches


class JobGroup:
    """The jobs of one network as one target for failure events."""

    def __init__(self, jobs: list[Job]):
        if not jobs:
            raise ValueError("a job group needs at least one job")
        self.jobs = list(jobs)
        self.g = self.jobs[0].g
        self.events = self.jobs[0].events

    @contextmanager
    def locked(self) -> Iterator[None]:
        """Every job's lock, always in the same order (no reroute of any job meanwhile)."""
        with ExitStack() as stack:
            for job in self.jobs:
                stack.enter_context(job.locked())
            yield

    def _stopped(self) -> bool:
        return any(getattr(job, "stopped", False) for job in self.jobs)

    def link_changed(self, u: str, v: str, up: bool, t: float, intf: str = "") -> None:
        """The link monitor's callback: mark u-v once, then every job reacts to it. Never
        raises into the monitor (its thread must keep watching): a reroute that fails, because
        a switch it needed died meanwhile, is logged (`link_failure_error`); that switch's own
        failure reroutes again."""
        if len(self.jobs) == 1:
            self._guarded(self.jobs[0], f"{u}-{v}", self.jobs[0].link_changed, u, v, up, t, intf)
            return
        with self.locked():
            if self._stopped():                    # teardown deletes interfaces: not failures
                return
            if up and self.g.edges[u, v].get("down_with"):
                return                             # a dead switch's port: it comes back with the switch
            if not mark_link(self.g, u, v, up):
                return                             # the other end of the same link
            self.events.add("link_up" if up else "link_down", t=t, link=f"{u}-{v}", intf=intf)
            for job in self.jobs:
                self._guarded(job, f"{u}-{v}", job.link_marked, u, v, up, t)

    def _guarded(self, job: Job, link: str, react, *args) -> None:
        try:
            react(*args)
        except Exception as exc:  # noqa: BLE001 - logged; the link monitor must keep watching
            self.events.add("link_failure_error", link=link, job=job.job, error=str(exc).splitlines()[0][:200])

    def switch_changed(self, sw: str, up: bool, t: float, program=None) -> None:
        """A switch died or was restarted: marked (and re-programmed, `program()`) once, then
        every job reroutes around it or takes it back. Every job is told even when an earlier
        one's reroute fails (a second switch it needed died or hung under it): that job is left
        frozen and its next failure event reroutes it, but a job told nothing would keep the
        dead switch on its trees for good (its workers time out). The first failure is raised
        once all were told, naming its job (the caller logs it); any others are logged here."""
        if len(self.jobs) == 1:
            self.jobs[0].switch_changed(sw, up, t, program)
            return
        errors = []
        with self.locked():
            if self._stopped():
                return
            if mark_switch(self.g, sw, up, program, self.events, t):
                for job in self.jobs:
                    try:
                        job.switch_marked(sw, up, t)
                    except Exception as exc:  # noqa: BLE001 - raised below, after the other jobs
                        errors.append((job.job, exc))
        for job, exc in errors[1:]:
            self.events.add("switch_failure_error", switch=sw, job=job, error=str(exc).splitlines()[0][:200])
        if errors:
            job, exc = errors[0]
            raise RuntimeError(f"job {job}: {str(exc).splitlines()[0]}") from exc

    # -- what the failure injector asks ------------------------------------------------
    def live_switches(self) -> list[str]:
        return self.jobs[0].live_switches()

    def failure_records(self) -> list[dict]:
        """Every job's failure records, each with its job's id (`job`)."""
        return [{**rec, "job": job.job} for job in self.jobs for rec in job.failure_records()]

    def pick_tree_link(self, seed: int) -> tuple[str, str]:
        """A switch-switch link on the active trees of as many jobs as possible (one failure
        that makes several jobs reroute), preferring one whose failure partitions no job;
        deterministic in seed. A single job picks as it always has."""
        if len(self.jobs) == 1:
            return self.jobs[0].pick_tree_link(seed)
        with self.locked():
            users: dict[tuple[str, str], int] = {}
            for job in self.jobs:
                for e in {tuple(sorted(e)) for t in job.treeset.trees for e in t.edges}:
                    users[e] = users.get(e, 0) + 1
            inner = [e for e in sorted(users) if all(self.g.nodes[n]["kind"] == "switch" for n in e)]
            safe = [e for e in inner if not any(partitions(self.g, e, job.workers) for job in self.jobs)]
            pool = safe or inner or sorted(users)
            most = max(users[e] for e in pool)
            return random.Random(seed).choice([e for e in pool if users[e] == most])

    def pick_tree_switch(self, seed: int) -> str:
        """An aggregating switch of as many jobs' trees as possible that is no worker's only
        edge switch, preferring one whose death partitions no job; deterministic in seed."""
        if len(self.jobs) == 1:
            return self.jobs[0].pick_tree_switch(seed)
        with self.locked():
            edge_only = only_edge_switches(self.g)
            live = set(self.live_switches())
            users: dict[str, int] = {}
            for job in self.jobs:
                trees = job.treeset.trees
                for s in {n for t in trees for e in t.edges for n in e if n in live and n not in edge_only}:
                    if any(_fan_in(t, s) >= 2 for t in trees):
                        users[s] = users.get(s, 0) + 1
            pool = sorted(users, key=natural_key)
            safe = [s for s in pool if not any(_partitions_without(self.g, s, job.workers) for job in self.jobs)]
            pool = safe or pool
            if not pool:
                return self.jobs[0].pick_tree_switch(seed)
            most = max(users[s] for s in pool)
            return random.Random(seed).choice([s for s in pool if users[s] == most])
