"""The controller's job for ATP (`--algorithm atp`): IP routes plus one atp_job entry per
aggregating switch; no trees, no slots, no carry.

Why a ForwardingJob: ATP's packets are addressed to the job's parameter server (rank 0's
host) and travel by the switches' ordinary IPv4 routes; a switch with an atp_job entry for
the job aggregates them in passing (p4src/include/atp.p4). So a link failure is what it is
for the host baselines: recompute the routes over live links (ForwardingJob.reroute);
packets lost meanwhile are resent by the workers and deduplicated by the PS, and nothing
in a switch needs carrying (an aggregator a resend left behind is released by the result).

Two levels, as in the paper: each worker's edge switch (its ToR) aggregates the job's
ranks below it (`expect` = their bits), and the PS's edge switch every remote rank (the
racks' partial sums and whatever fell back). Rank 0 is the PS: its own values never
enter the network, so its bit is in no `expect`.

Tenants (`--jobs J`) share the pool: job 0's AtpJob owns the routes and reroutes them (the
session hands it the link events), the others only install their atp_job entries.

WIRE_MODEL "atp" (emulation/wire_model.atp_seconds): these two levels' streams, the PS's
unicast of every result, every tenant's at once; the best the pool can do (no collision), a
lower bound on the time, since what falls back crosses to the PS alone.
"""

from __future__ import annotations

from pathlib import Path

import networkx as nx

from agglab.controller.events import EventLog
from agglab.controller.forwarding_job import ForwardingJob, Routes
from agglab.controller.switch_client import SwitchClient
from agglab.ground import wide_senders, wire
from agglab.ground.epoch_file import publish as publish_epoch

WIRE_MODEL = "atp"
POOL_REGISTERS = ("atp_bitmap", "atp_count")          # a zero bitmap is a free aggregator
ATP_STATS = ("atp_claim", "atp_add", "atp_done", "atp_collide", "atp_overlap", "atp_release", "atp_pass")
assert len(ATP_STATS) <= wire.CONST["ATP_STATS_SIZE"]


def star_pairs(workers: list[str]) -> list[tuple[str, str]]:
    """ATP's flows: every worker to the PS (rank 0's host) and back."""
    ps = workers[0]
    return [(w, ps) for w in workers[1:]] + [(ps, w) for w in workers[1:]]


def edge_switch(g: nx.Graph, host: str) -> str:
    """The switch a single-NIC host hangs off (its ToR)."""
    sws = [n for n in g.neighbors(host) if g.nodes[n]["kind"] == "switch"]
    if len(sws) != 1:
        raise ValueError(f"--algorithm atp: host {host} has {len(sws)} switches; ATP needs one ToR per host")
    return sws[0]


def expected_senders(g: nx.Graph, workers: list[str]) -> dict[str, int]:
    """Per aggregating switch, the rank bits it waits for: a worker ToR its ranks below it,
    the PS's ToR every rank but the PS's own."""
    expect: dict[str, int] = {}
    for rank, host in enumerate(workers[1:], start=1):
        sw = edge_switch(g, host)
        expect[sw] = expect.get(sw, 0) | 1 << rank
    everyone = ((1 << len(workers)) - 1) & ~1
    if everyone:
        expect[edge_switch(g, workers[0])] = everyone
    return expect


class AtpJob(ForwardingJob):
    """One tenant's ATP job (controller/job_protocol.py interface)."""

    def __init__(self, graph: nx.Graph, clients: dict[str, SwitchClient], workers: list[str], window: int,
                 epoch_file: Path, job: int = 0, events: EventLog | None = None, owns_routes: bool = True):
        if len(workers) > wide_senders.MAX_WORKERS:
            raise ValueError(f"--algorithm atp: a job's sender set is {wide_senders.MAX_WORKERS} bits "
                             f"(ATP_MAX_WORKERS), got {len(workers)} workers")
        super().__init__(graph, clients, workers, window, epoch_file, job=job, events=events, algorithm="atp",
                         pairs=star_pairs(workers))
        self.owns_routes = owns_routes
        self.expect = expected_senders(graph, workers)

    def start(self) -> "AtpJob":
        if self.owns_routes:
            super().start()
        else:
            self.treeset = Routes(self._paths(), epoch=0)
        for sw, senders in sorted(self.expect.items()):
            self.clients[sw].table_add("atp_job", "atp_aggregate", [self.job], [senders])
        self.publish_rates()
        self.events.add("atp_installed", job=self.job, switches=len(self.expect),
                        expect={sw: f"{m:#x}" for sw, m in sorted(self.expect.items())})
        return self

    def publish_rates(self) -> None:
        """The epoch file with `tree_mbps` {0: the slowest shaped link the job's routes
        cross}, from which the workers floor their timers (hosts/schemes/atp.py path_floor);
        written at start and after every reroute of the owner's routes. No file on
        unshaped links (nothing to wait for)."""
        rates = [r for r in (self.g.edges[e].get("bw") for e in self.treeset.edges) if r]
        if rates:
            publish_epoch(self.epoch_file, self.treeset.epoch, [], tree_mbps={0: min(rates)})

    def reroute(self, link: str, t_detect: float, record: bool = True, switch: str | None = None) -> dict:
        entry = super().reroute(link, t_detect, record, switch)
        self.publish_rates()
        return entry

    def prepare(self, window: int, algorithm: str | None = None) -> None:
        """Before each allreduce: every live switch's pool emptied (the tenant that owns the
        routes does it for all, before any tenant starts)."""
        self.window = window
        if self.owns_routes:
            with self.locked():
                for sw in self.live_switches():
                    self.clients[sw].commands(self.clients[sw].register_reset_lines(POOL_REGISTERS))

    def link_changed(self, u: str, v: str, up: bool, t: float, intf: str = "") -> None:
        if self.owns_routes:
            super().link_changed(u, v, up, t, intf)

    def link_marked(self, u: str, v: str, up: bool, t: float) -> None:
        """A link the JobGroup marked (tenants): the routes' owner recomputes them."""
        if self.owns_routes:
            self.reroute(f"{u}-{v}", t, record=not up)

    def switch_failed(self, sw: str, t: float) -> None:
        if self.owns_routes:
            super().switch_failed(sw, t)

    def switch_back(self, sw: str) -> None:
        if self.owns_routes:
            super().switch_back(sw)

    def switch_stats(self) -> dict[str, dict[str, int]]:
        """agg_stats as every job, and the atp_stats counter by name."""
        stats = super().switch_stats()
        with self.locked():
            for sw in stats:
                client = self.clients[sw]
                stats[sw].update({name: client.counter_read("atp_stats", i) for i, name in enumerate(ATP_STATS)})
        return stats


def install(seat) -> AtpJob:
    """The tenant's job (controller/schemes; seat: agglab.controller.installers.JobSeat): job 0's owns the routes."""
    return AtpJob(seat.graph, seat.clients, seat.workers, seat.spec.default_window(), seat.epoch_file,
                  job=seat.job, events=seat.events, owns_routes=seat.tenant == 0)


__all__ = ["WIRE_MODEL", "AtpJob", "expected_senders", "install", "star_pairs"]
