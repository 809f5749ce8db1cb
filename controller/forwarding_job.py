"""The controller's job for the host baselines (ring, ps): keep IP routes on live links.

Why a job at all: ring and PS workers sum on the hosts over TCP, so no aggregation tree
is installed; but when a link fails the switches' IP routes (static shortest paths,
controller/forward.py) still point into it, and TCP would retransmit into the dead
link until the worker gives up. This job plays the part a routing protocol plays in a
real network: told of a link-down or -up (the emulated network's netlink monitor, as
for TreeJob), it recomputes every switch's shortest paths over the live links and
rewrites only the ipv4_lpm entries whose next hop changed (table_modify by handle, so
routes that did not change never disappear, not even for a moment); TCP's next
retransmission takes the new path.

It is a `agglab.controller.job_protocol.Job` (start, prepare, link_changed, stop, locked, running,
trees, failure_records, pick_tree_link, stats; the epoch file's path only, as no
baseline worker watches one); its `treeset` is the `Routes` the algorithm's traffic crosses (ring: each rank to
its neighbours; ps: every pair), so `--fail tree@0.5` picks a link that traffic uses.
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass
from pathlib import Path

import networkx as nx

from agglab.controller.events import EventLog
from agglab.controller.forward import ipv4_routes, next_hops
from agglab.controller.job_protocol import Job
from agglab.controller.switch_client import SwitchClient
from agglab.controller.topology import mark_link, switches
from agglab.controller.trees.base import edge_key, live_graph


@dataclass(frozen=True)
class Routes:
    """The links the workers' IP paths cross at one epoch.

    Shaped like a TreeSet (trees, weights, epoch, uses) because the session and the
    failure injector read those: the one "tree" is the union of the worker-to-worker paths."""
    edges: frozenset
    epoch: int = 0
    weight: float = 1.0

    @property
    def trees(self) -> tuple:
        return (self,)

    @property
    def weights(self) -> tuple:
        return (self.weight,)

    def uses(self, u: str, v: str) -> bool:
        return edge_key(u, v) in self.edges


def ring_pairs(workers: list[str]) -> list[tuple[str, str]]:
    """Rank r sends to rank r+1 (and its TCP ACKs come back)."""
    n = len(workers)
    right = [(workers[r], workers[(r + 1) % n]) for r in range(n)] if n > 1 else []
    return right + [(b, a) for a, b in right]


def all_pairs(workers: list[str]) -> list[tuple[str, str]]:
    return list(itertools.permutations(workers, 2))


# spec.algorithm -> the ordered host pairs its traffic flows between
TRAFFIC = {"ring": ring_pairs, "ps": all_pairs}


def worker_paths(g: nx.Graph, pairs: list[tuple[str, str]], hops: dict[str, dict[str, str]]) -> frozenset:
    """Edges on the path each ordered (a, b) pair's packets take, following the switches'
    next hops `hops[switch][host]` (so it is the installed routes, not a fresh computation)."""
    live = live_graph(g)
    edges = set()
    for a, b in pairs:
        node = next((n for n in live.neighbors(a) if n in hops), None)
        if node is None:
            continue
        edges.add(edge_key(a, node))
        for _ in range(len(g)):                     # a path visits each node at most once
            nxt = hops[node].get(b)
            if nxt is None:
                break
            edges.add(edge_key(node, nxt))
            if nxt == b:
                break
            node = nxt
    return frozenset(edges)


class ForwardingJob(Job):
    """The host baselines' job (controller/job_protocol.py interface): IP routes, no trees, no slots."""

    def __init__(self, graph: nx.Graph, clients: dict[str, SwitchClient], workers: list[str], window: int,
                 epoch_file: Path, job: int = 0, events: EventLog | None = None, algorithm: str = "ps",
                 pairs: list[tuple[str, str]] | None = None):
        """pairs: the host pairs the traffic flows between, when `algorithm` is not in TRAFFIC
        (a subclass's own scheme)."""
        super().__init__(events)
        self.g, self.clients, self.workers = graph, clients, workers
        self.tree = ""                        # no trees: IP routes (`treeset` is their Routes)
        self.algorithm, self.pairs = algorithm, pairs if pairs is not None else TRAFFIC[algorithm](workers)
        self.window, self.job = window, job
        self.epoch_file = Path(epoch_file)    # never written: ring/ps workers have no epochs to watch
        self.handles: dict[str, dict[str, tuple[int, str, int]]] = {}    # switch -> prefix -> (handle, mac, port)
        self.treeset: Routes | None = None
        self.tree_of_slot: list[int] = []     # no slots: the hosts' TCP carries everything
        self.partitioned: str | None = None
        self.stopped = False

    # -- install ---------------------------------------------------------------------
    def start(self) -> "ForwardingJob":
        """Take over the IP routes the session installed, keeping every entry's handle."""
        t0 = time.monotonic()
        entries = 0
        for sw in switches(self.g):
            client = self.clients[sw]
            client.table_clear("ipv4_lpm")
            self.handles[sw] = {}
            for prefix, (mac, port) in ipv4_routes(self.g, sw).items():
                handle = client.table_add("ipv4_lpm", "ipv4_forward", [prefix], [mac, port])
                self.handles[sw][prefix] = (handle, mac, port)
                entries += 1
        self.treeset = Routes(self._paths(), epoch=0)
        self.events.add("routes_installed", epoch=0, entries=entries, links=len(self.treeset.edges),
                        install_ms=round((time.monotonic() - t0) * 1e3, 2))
        return self

    def prepare(self, window: int, algorithm: str | None = None) -> None:
        """Before each allreduce: nothing to reset on the switches (they only forward); a
        change between ring and ps changes the flows whose links `tree@x` picks from."""
        self.window = window
        if algorithm in TRAFFIC and algorithm != self.algorithm:
            with self.locked():
                self.algorithm, self.pairs = algorithm, TRAFFIC[algorithm](self.workers)
                self.treeset = Routes(self._paths(), epoch=self.treeset.epoch)

    def _paths(self) -> frozenset:
        return worker_paths(self.g, self.pairs, {sw: next_hops(self.g, sw) for sw in self.live_switches()})

    # -- link events -----------------------------------------------------------------
    def link_changed(self, u: str, v: str, up: bool, t: float, intf: str = "") -> None:
        """Link u-v went down or came back: recompute the routes over the live links."""
        with self.locked():
            if self.stopped:           # teardown deletes interfaces: not failures
                return
            if up and self.g.edges[u, v].get("down_with"):
                return                 # a dead switch's port: it comes back with the switch
            if mark_link(self.g, u, v, up):
                self.events.add("link_up" if up else "link_down", t=t, link=f"{u}-{v}", intf=intf)
                self.reroute(f"{u}-{v}", t, record=not up)

    def switch_failed(self, sw: str, t: float) -> None:
        """A dead switch (its links marked down): routes around it, as for a link."""
        self.handles.pop(sw, None)
        self.reroute(f"switch {sw}", t, switch=sw)

    def switch_back(self, sw: str) -> None:
        """A restarted switch: its ipv4_lpm entries anew (with handles), shortest paths back."""
        self.clients[sw].table_clear("ipv4_lpm")
        self.handles[sw] = {}
        self.reroute(f"switch {sw}", time.monotonic(), record=False, switch=sw)

    def reroute(self, link: str, t_detect: float, record: bool = True, switch: str | None = None) -> dict:
        """Rewrite the ipv4_lpm entries whose next hop changed; announce a partition."""
        t0 = time.monotonic()
        wanted = {sw: ipv4_routes(self.g, sw) for sw in self.live_switches()}
        t1 = time.monotonic()
        changed = 0
        for sw, routes in wanted.items():
            client, have = self.clients[sw], self.handles.setdefault(sw, {})
            for prefix, (mac, port) in routes.items():
                old = have.get(prefix)
                if old is None:
                    have[prefix] = (client.table_add("ipv4_lpm", "ipv4_forward", [prefix], [mac, port]), mac, port)
                elif old[1:] != (mac, port):
                    client.command(f"table_modify ipv4_lpm ipv4_forward {old[0]} {mac} {port}")
                    have[prefix] = (old[0], mac, port)
                else:
                    continue
                changed += 1
        t2 = time.monotonic()
        entry = {**({"switch": switch} if switch else {"link": link}), "t_detect": t_detect,
                 "recompute_ms": round((t1 - t0) * 1e3, 2),
                 "install_ms": round((t2 - t1) * 1e3, 2), "entries_changed": changed}
        self.partitioned = _partition(self.g, self.workers)
        if self.partitioned:                # the workers' TCP gives up naming the unreachable peer
            entry["partitioned"] = True
            self.events.add("partitioned", **({"switch": switch} if switch else {"link": link}),
                            reason=self.partitioned)
        if changed:
            self.treeset = Routes(self._paths(), epoch=self.treeset.epoch + 1)
            entry["epoch"] = self.treeset.epoch
            self.events.add("rerouted", **({"switch": switch} if switch else {"link": link}),
                            epoch=self.treeset.epoch, entries=changed,
                            recompute_ms=entry["recompute_ms"], install_ms=entry["install_ms"])
        else:
            self.events.add("no_reinstall", **({"switch": switch} if switch else {"link": link}),
                            why="no worker route crosses it")
        if record and (changed or self.partitioned):
            self.record_failure(entry)
        return entry

    def stop(self) -> None:
        with self.locked():
            self.stopped = True


def _partition(g: nx.Graph, workers: list[str]) -> str | None:
    """Why the workers cannot all reach each other over live links, or None."""
    live = live_graph(g)
    cut = [w for w in workers[1:] if not nx.has_path(live, workers[0], w)]
    return f"{', '.join(cut)} unreachable from {workers[0]}" if cut else None
