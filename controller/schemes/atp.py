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

With --atp-multicast the PS sends each result once, addressed to every worker, and its
ToR replicates it (`atp_aggregate_mcast`): one multicast node per worker, on the port of
the ToR's route to it, whose rid (job << 8 | rank) `copy_dst` turns into the worker's
addresses; a reroute moves the nodes with the routes. Without it the PS unicasts.

Tenants (`--jobs J`) share the pool: job 0's AtpJob owns the routes and reroutes them (the
session hands it the link events), the others only install their atp_job entries.

WIRE_MODEL "atp" (emulation/wire_model.atp_seconds): these two levels' streams, the PS's
unicast of every result (or its one copy, replicated at its ToR), every tenant's at once; the best the pool can do (no collision), a
lower bound on the time, since what falls back crosses to the PS alone.
"""

from __future__ import annotations

from pathlib import Path

import networkx as nx

from agglab.controller.addressing import interface_address
from agglab.controller.events import EventLog
from agglab.controller.forward import next_hops
from agglab.controller.forwarding_job import ForwardingJob, Routes
from agglab.controller.switch_client import SwitchClient
from agglab.controller.topology import port
from agglab.controller.tree_install import tree_group
from agglab.ground import wide_senders, wire
from agglab.ground.epoch_file import publish as publish_epoch

WIRE_MODEL = "atp"
POOL_REGISTERS = ("atp_bitmap", "atp_count", "atp_retx")          # a zero bitmap is a free aggregator
ATP_STATS = ("atp_claim", "atp_add", "atp_done", "atp_collide", "atp_overlap", "atp_release", "atp_pass",
             "atp_mcast")
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


def copy_rid(job: int, rank: int) -> int:
    """The multicast node's rid of `rank`'s copy of a job's result: unique on the switch
    (copy_dst is keyed by it alone), job ids and ranks both fit in 8 bits."""
    return job << 8 | rank


def multicast_ports(g: nx.Graph, tor: str, workers: list[str]) -> dict[int, int]:
    """Per worker rank (the PS's, 0, aside), the port of `tor`'s route toward it: the copy
    for that worker leaves there and then follows the ordinary routes."""
    hops = next_hops(g, tor)
    return {rank: port(g, tor, hops[host]) for rank, host in enumerate(workers) if rank}


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
                 epoch_file: Path, job: int = 0, events: EventLog | None = None, owns_routes: bool = True,
                 multicast: bool = False):
        if len(workers) > wide_senders.MAX_WORKERS:
            raise ValueError(f"--algorithm atp: a job's sender set is {wide_senders.MAX_WORKERS} bits "
                             f"(ATP_MAX_WORKERS), got {len(workers)} workers")
        super().__init__(graph, clients, workers, window, epoch_file, job=job, events=events, algorithm="atp",
                         pairs=star_pairs(workers))
        self.owns_routes = owns_routes
        self.expect = expected_senders(graph, workers)
        self.multicast = multicast
        self.ps_tor = edge_switch(graph, workers[0])
        self.group = tree_group(job, 0, 0)          # an ATP job has no trees: its one group
        self.nodes: list[int] = []                  # the group's node handles at the PS's ToR

    def start(self) -> "AtpJob":
        if self.owns_routes:
            super().start()
        else:
            self.treeset = Routes(self._paths(), epoch=0)
        for sw, senders in sorted(self.expect.items()):
            if self.multicast and sw == self.ps_tor:
                self.clients[sw].table_add("atp_job", "atp_aggregate_mcast", [self.job], [senders, self.group])
            else:
                self.clients[sw].table_add("atp_job", "atp_aggregate", [self.job], [senders])
        if self.multicast and len(self.workers) > 1:
            client = self.clients[self.ps_tor]
            for rank, host in enumerate(self.workers[1:], start=1):
                ip, mac = interface_address(self.g, host, edge_switch(self.g, host))
                client.table_add("copy_dst", "copy_set_dst", [copy_rid(self.job, rank)], [mac, ip])
            self._multicast_nodes()
        self.publish_rates()
        self.events.add("atp_installed", job=self.job, switches=len(self.expect), multicast=self.multicast,
                        expect={sw: f"{m:#x}" for sw, m in sorted(self.expect.items())})
        return self

    def _multicast_nodes(self) -> None:
        """The PS's ToR's group: one node per worker on the port of the ToR's current route to
        it (replacing the nodes of the routes before, after a reroute)."""
        client = self.clients[self.ps_tor]
        for handle in self.nodes:
            client.command(f"mc_node_dissociate {self.group} {handle}")
            client.command(f"mc_node_destroy {handle}")
        self.nodes = [client.mc_group(self.group, [p], rid=copy_rid(self.job, rank))
                      for rank, p in sorted(multicast_ports(self.g, self.ps_tor, self.workers).items())]

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
        if self.multicast and len(self.workers) > 1 and self.ps_tor in self.live_switches():
            with self.locked():
                self._multicast_nodes()
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
        """A link the JobGroup marked (tenants): the routes' owner recomputes them; another
        tenant's multicast nodes follow the marked graph's routes."""
        if self.owns_routes:
            self.reroute(f"{u}-{v}", t, record=not up)
        elif self.multicast and len(self.workers) > 1 and self.ps_tor in self.live_switches():
            with self.locked():
                self._multicast_nodes()

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
                  job=seat.job, events=seat.events, owns_routes=seat.tenant == 0,
                  multicast=seat.spec.result_multicast)


__all__ = ["WIRE_MODEL", "AtpJob", "copy_rid", "expected_senders", "install", "multicast_ports", "star_pairs"]
