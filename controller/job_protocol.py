"""What every aggregation job offers the layers above: one small interface, no shared flags.

Why an interface: the session, the failure injector and the lab drive a job while the
netlink monitor calls `link_changed` from its own thread. They used to reach into the
job (`job.lock`, `job.busy = True`, `job.failures`), so each of them had to know the
job's locking and bookkeeping, and `BmlJob` had to copy `TreeJob`'s attribute names. Now
they only call methods: `with job.running():` around an allreduce, `with job.locked():`
to use the job's switch sockets without racing a reroute, `job.failure_records()`,
`job.stats()`, `job.trees()`, `job.state()`.

`Job` holds what both jobs share (lock, running flag, failure log, counters);
`TreeJob` (controller/tree_job.py) and `BmlJob` (controller/bml_job.py) fill in the rest.
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

from agglab.ground.schemes import DEFAULT as DEFAULT_SCHEME
from agglab.controller import aggregate
from agglab.ground.runspec import only_edge_switches
from agglab.controller.events import EventLog
from agglab.controller.switch_client import SwitchClient, SwitchCommandError
from agglab.controller.topology import natural_key, switches
from agglab.controller.trees.base import TreeSet


@dataclass(frozen=True)
class JobState:
    """A consistent view of a job for display (the lab's `trees`): `tree` the tree algorithm
    ('' on IP routes), `algorithm` the scheme its allreduces run (ground/schemes.py)."""
    tree: str
    algorithm: str
    treeset: TreeSet
    tree_of_slot: tuple[int, ...]
    window: int
    partitioned: str | None


class Job(ABC):
    """An aggregation job on a programmed network. Subclasses set, before `start()`:
    g, clients, workers, window, epoch_file, job (id), tree, algorithm, treeset, tree_of_slot,
    and call `Job.__init__`. `tree` is the tree algorithm (controller/trees/NAME.py; '' for a job
    on IP routes, which has none), `algorithm` the scheme its allreduces run (ground/schemes.py):
    the two words mean the same things as `--tree` and `--algorithm`."""

    g: nx.Graph
    clients: dict[str, SwitchClient]
    workers: list[str]
    window: int
    epoch_file: Path
    job: int
    tree: str
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
    def prepare(self, window: int, algorithm: str = DEFAULT_SCHEME) -> None:
        """Before each allreduce: fresh registers, `window` slots per worker (and, where the
        job reroutes, what a reroute carries for the allreduce `algorithm`)."""

    @abstractmethod
    def link_changed(self, u: str, v: str, up: bool, t: float, intf: str = "") -> None:
        """Link u-v went down or came back (netlink, or a test's in-process network)."""

    @property
    def label(self) -> str:
        """What messages call the job: its tree algorithm, or its scheme where it has no trees."""
        return self.tree or self.algorithm

    def reinstall(self, tree: str | None = None, why: str = "") -> None:
        """Between allreduces: recompute under a new epoch (maybe with another tree algorithm)."""
        raise ValueError(f"a {self.label} job cannot change its trees")

    # -- switch failures ---------------------------------------------------------------
    def switch_changed(self, sw: str, up: bool, t: float, program=None) -> None:
        """Switch `sw` died (its process exited: every link of it failed at once) or was
        restarted. A death marks the switch and its live links down in the shared graph
        (their netlink events, which follow, are then the other end of a known failure) and
        calls `switch_failed`; a restart marks them up again (exactly the links that went down
        with it), runs `program()` (the caller's forwarding and drop simulator on the fresh,
        empty switch) and calls `switch_back`."""
        with self._lock:
            if getattr(self, "stopped", False):        # teardown stops switches: not failures
                return
            if mark_switch(self.g, sw, up, program, self.events, t):
                self.switch_marked(sw, up, t)

    def switch_marked(self, sw: str, up: bool, t: float) -> None:
        """React to a switch already marked dead or alive in the shared graph (by this job,
        or by the JobGroup that tells every job of one network)."""
        if up:
            self.switch_back(sw)
        else:
            self.switch_failed(sw, t)

    def link_marked(self, u: str, v: str, up: bool, t: float) -> None:
        """React to link u-v already marked down or up in the shared graph (JobGroup: one
        failure event, every job of the network told). Nothing by default."""

    def switch_failed(self, sw: str, t: float) -> None:
        """A switch died (its links are already marked down): reroute around it."""
        self.events.add("no_reinstall", switch=sw, why=f"a {self.label} job does not reroute")

    def switch_back(self, sw: str) -> None:
        """A restarted switch rejoined (empty tables; forwarding already re-programmed)."""

    def live_switches(self) -> list[str]:
        """The switches whose process runs (a dead one's client must not be used)."""
        return [s for s in switches(self.g) if self.g.nodes[s].get("up", True) is not False]

    def pick_tree_switch(self, seed: int) -> str:
        """The switch `--fail-switch tree@x` kills: one of the active trees' aggregating switches
        (two or more children on some tree) that is no worker's only edge switch, preferring one
        whose death leaves every worker reachable (a reroute, not a partition); else any tree
        switch that is no worker's only edge switch; else any such live switch. Deterministic
        in seed."""
        with self._lock:
            edge_only = only_edge_switches(self.g)
            live = set(self.live_switches())
            trees = self.treeset.trees
            on_tree = sorted({n for t in trees for e in t.edges for n in e
                              if n in live and n not in edge_only}, key=natural_key)
            aggregating = [s for s in on_tree if any(_fan_in(t, s) >= 2 for t in trees)]
            pool = aggregating or on_tree
            safe = [s for s in pool if not _partitions_without(self.g, s, self.workers)]
            pool = safe or pool or sorted(live - edge_only, key=natural_key)
            if not pool:
                raise ValueError("--fail-switch tree@F: every live switch is some worker's only edge switch")
            return random.Random(seed).choice(pool)

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
            return JobState(self.tree, self.algorithm, self.treeset, tuple(self.tree_of_slot), self.window,
                            self.partitioned)

    def switch_stats(self) -> dict[str, dict[str, int]]:
        """Per switch, the agg_stats counters by name (read under the job's lock). A switch that
        dies between the last failure event and this read is left out, as a dead one is: its
        counts died with it, and its death reaches the job through the switch watcher."""
        out = {}
        with self._lock:
            for sw in self.live_switches():
                try:
                    out[sw] = aggregate.read_stats(self.clients[sw])
                except SwitchCommandError:
                    continue
        return out

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
            return pick_link(self.g, self.treeset, self.workers, seed)


def pick_link(g: nx.Graph, treeset: TreeSet, workers: list[str], seed: int) -> tuple[str, str]:
    """Job.pick_tree_link's choice on a given graph and trees (also what `agglab draw --fail
    tree` draws)."""
    edges = sorted({e for t in treeset.trees for e in t.edges})
    inner = [e for e in edges if all(g.nodes[n]["kind"] == "switch" for n in e)]
    safe = [e for e in inner if not partitions(g, e, workers)]
    return random.Random(seed).choice(safe or inner or edges)


def mark_switch(g: nx.Graph, sw: str, up: bool, program, events: EventLog, t: float) -> bool:
    """Mark switch `sw` and its links (mark_switch_links) dead or alive in the shared graph,
    once for every job of the network; on a restart run `program()` first thing (a failure
    marks it dead again and raises). False when it already was (nothing to react to)."""
    node = g.nodes[sw]
    if node.get("up", True) == up:
        return False
    node["up"] = up
    links = mark_switch_links(g, sw, up)
    if up and program is not None:
        try:
            program()                           # routes are computed over live nodes and links
        except BaseException:
            node["up"] = False
            mark_switch_links(g, sw, False)
            raise
    events.add("switch_up" if up else "switch_down", t=t, switch=sw, links=len(links))
    return True


def partitions(g: nx.Graph, edge: tuple[str, str], workers: list[str]) -> bool:
    """Would taking `edge` down leave some worker unreachable from the others over live links?"""
    live = nx.Graph((u, v) for u, v, d in g.edges(data=True) if d.get("up", True) and {u, v} != set(edge))
    return not all(w in live for w in workers) or _apart(live, workers)


def _apart(live: nx.Graph, workers: list[str]) -> bool:
    """Some worker is not in the first one's component. One search, where a path search per
    worker made tree@F's choice over a k=8 fat-tree's 256 links cost 0.39 s of CPU at 128
    workers (0.11 s this way)."""
    if len(workers) < 2:
        return False
    reach = nx.node_connected_component(live, workers[0])
    return not all(w in reach for w in workers[1:])


def mark_switch_links(g: nx.Graph, sw: str, up: bool) -> list[tuple[str, str]]:
    """A dead switch's live links go down with it (remembered as `down_with`); a restart
    brings back exactly those (a link failed on its own stays down). Returns the links changed."""
    changed = []
    for nbr in g.neighbors(sw):
        e = g.edges[sw, nbr]
        if not up and e.get("up", True):
            e["up"], e["down_with"] = False, sw
            changed.append((sw, nbr))
        elif up and e.get("down_with") == sw:
            e.pop("down_with")
            e["up"] = True
            changed.append((sw, nbr))
    return changed


def _fan_in(tree, sw: str) -> int:
    """Children of `sw` on a tree (a Routes "tree" has no parents: its degree there)."""
    if hasattr(tree, "children"):
        return len(tree.children(sw)) if sw in getattr(tree, "parent", {}) else 0
    return sum(1 for e in tree.edges if sw in e)


def _partitions_without(g: nx.Graph, sw: str, workers: list[str]) -> bool:
    """Would the death of switch `sw` leave some worker unreachable from the others?"""
    live = nx.Graph()
    live.add_nodes_from(workers)
    live.add_edges_from((u, v) for u, v, d in g.edges(data=True)
                        if d.get("up", True) and sw not in (u, v)
                        and g.nodes[u].get("up", True) is not False and g.nodes[v].get("up", True) is not False)
    return _apart(live, workers)
