"""BML on BCube as a job: the in-network variant installed into the level switches, and
the per-worker plan both variants need.

In-network (ours): part j of the gradient, at stage s, is allreduced inside each group
of n servers by their level-((j+s) mod L) switch. Every (part, level switch) pair occurs
exactly once, so part j gets its own tree id and its own slot region (slot_base = j*S)
at every switch, and never meets another part's state. Host-based (the paper's): the
same stages as explicit server-to-server transfers, each one hop through a level switch
(plain L3 forwarding), executed by hosts/bml_host.py.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import networkx as nx

from ground import wire
from ground.addresses import SERVICE_IP, SERVICE_MAC
from controller.addressing import interface_address
from controller.aggregate import job_entry
from controller.events import EventLog
from controller.job_protocol import Job
from controller.switch_client import SwitchClient
from controller.topology import port, workers as worker_hosts
from controller.tree_install import tree_group
from controller.trees import compute
from controller.trees.bml import schedule


class BmlJob(Job):
    """BML's fixed schedule as a Job: nothing to reroute (the schedule needs every NIC)."""

    def __init__(self, graph: nx.Graph, clients: dict[str, SwitchClient], window: int, epoch_file: Path,
                 job: int = 0, events: EventLog | None = None, variant: str = "in-network"):
        Job.__init__(self, events)
        self.g, self.clients, self.job = graph, clients, job
        self.variant = variant
        self.sched = self.check(graph)
        self.levels = self.sched.levels
        self.workers = list(self.sched.hosts)
        self.window = min(window, wire.SLOTS // self.levels)
        self.epoch_file = Path(epoch_file)
        self.treeset = compute("bml", graph, self.workers)
        self.algorithm = "bml"
        self.tree_of_slot: list[int] = []
        self.partitioned = None

    @staticmethod
    def check(graph: nx.Graph):
        """BML's schedule for the graph; ValueError unless every BCube server is a worker."""
        sched = schedule(graph)
        if len(worker_hosts(graph)) != len(sched.hosts):
            raise ValueError(f"BML needs every BCube server as a worker ({len(sched.hosts)}), "
                             f"got {len(worker_hosts(graph))}")
        return sched

    def start(self) -> "BmlJob":
        t0 = time.monotonic()
        entries = 0
        if self.variant == "in-network":
            entries = self._install()
        self.events.add("bml_installed", variant=self.variant, levels=self.levels, n=self.sched.n,
                        entries=entries, install_ms=round((time.monotonic() - t0) * 1e3, 2))
        return self

    def _install(self) -> int:
        entries, replies = 0, set()
        for stage in self.sched.in_network:
            for step in stage:
                client = self.clients[step.switch]
                ports = [port(self.g, step.switch, h) for h in step.members]
                group = tree_group(self.job, step.part, 0)
                client.mc_group(group, ports)
                for child, (h, p) in enumerate(zip(step.members, ports)):
                    client.table_add(*job_entry(self.job, step.part, 0, p, child=child, fan_in=len(ports),
                                                mgrp=group, slot_base=step.part * self.window))
                    if (step.switch, p) not in replies:
                        ip, mac = interface_address(self.g, h, step.switch)
                        client.table_add("agg_reply", "agg_set_dst", [p], [SERVICE_MAC, SERVICE_IP, mac, ip])
                        replies.add((step.switch, p))
                        entries += 1
                    entries += 1
        return entries

    def plan_for(self, host: str) -> dict:
        """What one worker needs: its NIC per level and its index in each level group."""
        nics, rank_in_group = {}, {}
        for stage in self.sched.in_network:
            for step in stage:
                if host in step.members:
                    ip, _ = interface_address(self.g, host, step.switch)
                    nics[step.level] = {"ip": ip, "dev": self.g.edges[host, step.switch]["intfs"][host]}
                    rank_in_group[step.level] = step.members.index(host)
        plan = {"me": host, "variant": self.variant, "levels": self.levels, "n": self.sched.n, "window": self.window,
                "nics": nics, "rank_in_group": rank_in_group}
        if self.variant == "host":
            from hosts.bml_host import plan_to_json

            plan["schedule"] = plan_to_json(self.sched)
            plan["nic_ip"] = {f"{h}|{l}": interface_address(self.g, h, sw)[0]
                              for h in self.sched.hosts for sw in self.g.neighbors(h)
                              for l in [self.g.edges[h, sw]["level"]]}
        return plan

    def write_plans(self, directory: Path) -> dict[str, Path]:
        paths = {}
        for h in self.workers:
            paths[h] = directory / f"{h}.bml.json"
            paths[h].write_text(json.dumps(self.plan_for(h)))
        return paths

    def prepare(self, window: int, algorithm: str = "switchml") -> None:
        """Fresh registers; `algorithm` as TreeJob.prepare (BML runs switchml and reroutes nothing)."""
        from controller.reroute import failover

        failover.reset(self.clients, list(self.clients))

    def link_changed(self, u: str, v: str, up: bool, t: float, intf: str = "") -> None:
        """BML reroutes nothing: its schedule needs every NIC."""
        self.events.add("link_up" if up else "link_down", t=t, link=f"{u}-{v}", intf=intf)
