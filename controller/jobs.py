"""What every aggregation job offers the layers above: one small interface, no shared flags.

Why an interface: the session, the failure injector and the lab drive a job while the
netlink monitor calls `link_changed` from its own thread. They used to reach into the
job (`job.lock`, `job.busy = True`, `job.failures`), so each of them had to know the
job's locking and bookkeeping, and `BmlJob` had to copy `TreeJob`'s attribute names. Now
they only call methods: `with job.running():` around an allreduce, `with job.locked():`
to use the job's switch sockets without racing a reroute, `job.failure_records()`,
`job.stats()`, `job.trees()`, `job.state()`.

`Job` holds what both jobs share (lock, running flag, failure log, counters);
`TreeJob` (controller/job.py) and `BmlJob` (controller/bml_job.py) fill in the rest.
"""

from __future__ import annotations

import random
import threading
from abc import ABC, abstractmethod
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import networkx as nx

from controller import aggregate
from controller.events import EventLog
from controller.switch_client import SwitchClient
from controller.topology import switches
from controller.trees.base import TreeSet


@dataclass(frozen=True)
class JobState:
    """A consistent view of a job for display (the lab's `trees`)."""
    algorithm: str
    treeset: TreeSet
    tree_of_slot: tuple[int, ...]
    window: int
    partitioned: str | None


class Job(ABC):
    """An aggregation job on a programmed network. Subclasses set, before `start()`:
    g, clients, workers, window, epoch_file, job (id), algorithm, treeset, tree_of_slot,
    and call `Job.__init__`."""

    g: nx.Graph
    clients: dict[str, SwitchClient]
    workers: list[str]
    window: int
    epoch_file: Path
    job: int
    algorithm: str
    treeset: TreeSet | None
    tree_of_slot: list[int]
    partitioned: str | None

    def __init__(self, events: EventLog | None = None):
        self.events = events or EventLog()
        self._lock = threading.RLock()
        self._running = False
        self._failures: list[dict] = []

    # -- life cycle (per job) ----------------------------------------------------------
    @abstractmethod
    def start(self) -> "Job":
        """Compute and install what the job needs in the switches; returns self."""

    @abstractmethod
    def prepare(self, window: int, algorithm: str = "switchml") -> None:
        """Before each allreduce: fresh registers, `window` slots per worker (and, where the
        job reroutes, what a reroute carries for the allreduce `algorithm`)."""

    @abstractmethod
    def link_changed(self, u: str, v: str, up: bool, t: float, intf: str = "") -> None:
        """Link u-v went down or came back (netlink, or a test's in-process network)."""

    def reinstall(self, algorithm: str | None = None, why: str = "") -> None:
        """Between allreduces: recompute under a new epoch (maybe with another algorithm)."""
        raise ValueError(f"a {self.algorithm} job cannot change its trees")

    def write_plans(self, directory: Path) -> dict[str, Path]:
        """Per worker host, an extra plan file its worker reads (none by default)."""
        return {}

    def stop(self) -> None:
        """No more reroutes: teardown deletes interfaces, which are not failures."""

    # -- what the layers above use instead of attributes -------------------------------
    @contextmanager
    def locked(self) -> Iterator[None]:
        """Hold the job's lock: the controller's reroute uses the same switch sockets."""
        with self._lock:
            yield

    @contextmanager
    def running(self) -> Iterator[None]:
        """An allreduce is running: a recovered link must not reinstall trees under it."""
        with self._lock:
            self._running = True
        try:
            yield
        finally:
            with self._lock:
                self._running = False

    @property
    def is_running(self) -> bool:
        return self._running

    def record_failure(self, record: dict) -> None:
        with self._lock:
            self._failures.append(record)

    def failure_records(self) -> list[dict]:
        """One dict per link failure that hit an active tree (link, t_detect, epoch, timings)."""
        with self._lock:
            return [dict(r) for r in self._failures]

    def trees(self) -> TreeSet:
        """The trees installed now."""
        with self._lock:
            return self.treeset

    def state(self) -> JobState:
        with self._lock:
            return JobState(self.algorithm, self.treeset, tuple(self.tree_of_slot), self.window,
                            self.partitioned)

    def switch_stats(self) -> dict[str, dict[str, int]]:
        """Per switch, the agg_stats counters by name (read under the job's lock)."""
        with self._lock:
            return {sw: aggregate.read_stats(self.clients[sw]) for sw in switches(self.g)}

    def stats(self) -> dict[str, int]:
        """The agg_stats counters summed over every switch."""
        total: dict[str, int] = {}
        for counters in self.switch_stats().values():
            for key, value in counters.items():
                total[key] = total.get(key, 0) + value
        return total

    def read_registers(self, switch: str, names) -> dict[str, list[int]]:
        """Whole registers of one switch, read under the job's lock (the lab's `slots`)."""
        with self._lock:
            return {n: self.clients[switch].register_read(n) for n in names}

    def pick_tree_link(self, seed: int) -> tuple[str, str]:
        """A switch-switch link of the active trees (a worker's only link would partition it),
        preferring one whose failure leaves every worker reachable over live links, so
        `tree@x` asks for a reroute, not a partition; else any tree link. Deterministic in seed."""
        with self._lock:
            edges = sorted({e for t in self.treeset.trees for e in t.edges})
            inner = [e for e in edges if all(self.g.nodes[n]["kind"] == "switch" for n in e)]
            safe = [e for e in inner if not partitions(self.g, e, self.workers)]
            return random.Random(seed).choice(safe or inner or edges)


def partitions(g: nx.Graph, edge: tuple[str, str], workers: list[str]) -> bool:
    """Would taking `edge` down leave some worker unreachable from the others over live links?"""
    live = nx.Graph((u, v) for u, v, d in g.edges(data=True) if d.get("up", True) and {u, v} != set(edge))
    return not all(w in live for w in workers) or any(
        not nx.has_path(live, workers[0], w) for w in workers[1:])
