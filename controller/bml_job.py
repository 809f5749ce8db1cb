"""BML on BCube as a job: the in-network variant installed into the level switches, and
the per-worker plan both variants need.

In-network (ours): part j of the gradient, at stage s, is allreduced inside each group
of n servers by their level-((j+s) mod L) switch. Every (part, level switch) pair occurs
exactly once, so part j gets its own tree id and its own slot region (slot_base = j*S)
at every switch, and never meets another part's state. Host-based (the paper's): the
same stages as explicit server-to-server transfers, each one hop through a level switch
(plain L3 forwarding), executed by hosts/bml_host.py.

Under failure (in-network variant): a failed server link or level switch that the schedule
uses re-plans it over what remains (controller/trees/bml_relay.py: switches sum their groups,
servers relay between groups), installed under a new epoch after the old entries are
cleared; the servers are told through the epoch file (`status: replan`) and run the new
schedule from their own inputs again. The host variant does not re-plan.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import networkx as nx

from agglab.controller.reroute import failover
from agglab.ground import wire
from agglab.ground.addresses import SERVICE_IP, SERVICE_MAC
from agglab.ground.schemes import DEFAULT as DEFAULT_SCHEME
from agglab.controller.addressing import interface_address
from agglab.controller.aggregate import job_entry
from agglab.controller.events import EventLog
from agglab.controller.job_protocol import Job
from agglab.controller.switch_client import SwitchClient
from agglab.controller.topology import mark_link, port, workers as worker_hosts
from agglab.controller.tree_install import tree_group
from agglab.controller.trees import compute
from agglab.controller.trees.base import TreeError
from agglab.controller.trees.bml import schedule
from agglab.controller.trees.bml_relay import RelayPlan, host_steps, relay_plan, step_job
from agglab.hosts.bml_host import plan_to_json


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
        self.tree = "bml"
        self.algorithm = DEFAULT_SCHEME        # BML's schedule runs the dense pipeline
        self.tree_of_slot: list[int] = []
        self.partitioned = None
        self.epoch = 0
        self.relay: RelayPlan | None = None     # the re-planned schedule, once a failure hit BML's
        self.groups: dict[str, list] = {}        # switch -> (group, node handle) installed
        self.replies: set = set()                 # (switch, port) with an agg_reply entry
        self.plan_dir: Path | None = None         # where the running allreduce's plans are
        self.stopped = False

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
        entries, replies = 0, self.replies
        for stage in self.sched.in_network:
            for step in stage:
                client = self.clients[step.switch]
                ports = [port(self.g, step.switch, h) for h in step.members]
                group = tree_group(self.job, step.part, 0)
                self.groups.setdefault(step.switch, []).append((group, client.mc_group(group, ports)))
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
            plan["schedule"] = plan_to_json(self.sched)
            plan["nic_ip"] = {f"{h}|{l}": interface_address(self.g, h, sw)[0]
                              for h in self.sched.hosts for sw in self.g.neighbors(h)
                              for l in [self.g.edges[h, sw]["level"]]}
        return plan

    def relay_plan_for(self, host: str) -> dict:
        """What one server needs of the re-planned schedule: its steps and the NIC to each
        step's switch."""
        steps = host_steps(self.relay, host, self.job)
        nics = {}
        for step in steps:
            ip, _ = interface_address(self.g, host, step["switch"])
            nics[step["switch"]] = {"ip": ip, "dev": self.g.edges[host, step["switch"]]["intfs"][host]}
        return {"me": host, "variant": "relay", "epoch": self.epoch, "window": self._relay_window(),
                "steps": steps, "nics": nics, "root": self.relay.root}

    def _relay_window(self) -> int:
        return max(1, min(self.window, wire.SLOTS // max(1, len(self.relay.steps))))

    def write_plans(self, directory: Path) -> dict[str, Path]:
        with self.locked():
            self.plan_dir = Path(directory)
            paths = {}
            for h in self.workers:
                paths[h] = directory / f"{h}.bml.json"
                paths[h].write_text(json.dumps(self.relay_plan_for(h) if self.relay else self.plan_for(h)))
            return paths

    def prepare(self, window: int, algorithm: str = DEFAULT_SCHEME) -> None:
        """Fresh registers on the live switches; `algorithm` (the scheme) as TreeJob.prepare (BML runs switchml)."""
        with self.locked():
            failover.reset(self.clients, self.live_switches())

    # -- failures ----------------------------------------------------------------------
    def link_changed(self, u: str, v: str, up: bool, t: float, intf: str = "") -> None:
        """A failed server link the schedule uses re-plans it (in-network variant)."""
        with self.locked():
            if self.stopped or (up and self.g.edges[u, v].get("down_with")):
                return
            if not mark_link(self.g, u, v, up):
                return                                   # the other end of the same link
            self.events.add("link_up" if up else "link_down", t=t, link=f"{u}-{v}", intf=intf)
            if not up and self._uses_link(u, v):
                self.replan(f"link {u}-{v}", t, link=f"{u}-{v}")
            elif not up:
                self.events.add("no_reinstall", link=f"{u}-{v}", why="not on the schedule")

    def switch_failed(self, sw: str, t: float) -> None:
        """A dead level switch (its links marked down) re-plans the schedule without it."""
        self.groups.pop(sw, None)
        self.replies -= {r for r in self.replies if r[0] == sw}
        if self.relay is None or sw in self.relay.switches():
            self.replan(f"switch {sw}", t, switch=sw)
        else:
            self.events.add("no_reinstall", switch=sw, why="not on the schedule")

    def switch_back(self, sw: str) -> None:
        """A restarted level switch: forwarding is back; the re-planned schedule stays (it does
        not need the switch), so nothing changes until the job is started again."""
        self.events.add("no_reinstall", switch=sw, why="BML keeps its re-planned schedule")

    def _uses_link(self, u: str, v: str) -> bool:
        if self.relay is not None:
            return self.relay.uses(u, v)
        return {self.g.nodes[u]["kind"], self.g.nodes[v]["kind"]} == {"host", "switch"}

    def replan(self, what: str, t_detect: float, link: str | None = None, switch: str | None = None) -> dict:
        """Re-plan over the live links and switches (controller/trees/bml_relay.py), install it
        under a new epoch and tell the servers. Old entries and groups go first (every live
        switch's agg_job is cleared: BML is the only job on BCube), so a packet of the
        abandoned schedule is rejected and touches no register."""
        record = {"switch": switch} if switch else {"link": link}
        record["t_detect"] = t_detect
        if self.variant != "in-network":
            self.events.add("no_reinstall", **{k: v for k, v in record.items() if k != "t_detect"},
                            why="the host variant does not re-plan")
            return record
        t0 = time.monotonic()
        try:
            plan = relay_plan(self.g, self.workers)
        except TreeError as exc:
            self.partitioned = str(exc)
            self._publish("partitioned", f"{what} failed and the servers are partitioned: {exc}")
            record.update(partitioned=True, recompute_ms=round((time.monotonic() - t0) * 1e3, 2),
                          t_recovered=time.monotonic())
            self.events.add("partitioned", reason=str(exc))
            self.record_failure(record)
            return record
        t1 = time.monotonic()
        live = self.live_switches()
        for sw in live:
            lines = ["table_clear agg_job"]
            for group, handle in self.groups.pop(sw, []):
                lines += [f"mc_node_dissociate {group} {handle}", f"mc_node_destroy {handle}",
                          f"mc_mgrp_destroy {group}"]
            self.clients[sw].commands(lines)

        failover.reset(self.clients, live)
        self.epoch += 1
        self.relay = plan
        entries = self._install_relay()
        if self.plan_dir is not None:                  # a running allreduce: its servers' next plans
            for h in self.workers:
                (self.plan_dir / f"{h}.e{self.epoch}.bml.json").write_text(json.dumps(self.relay_plan_for(h)))
        self.treeset = self.treeset.with_epoch(self.epoch)
        self._publish("replan", f"{what} failed")
        t2 = time.monotonic()
        record.update(epoch=self.epoch, partitioned=False, recompute_ms=round((t1 - t0) * 1e3, 2),
                      install_ms=round((t2 - t1) * 1e3, 2), steps=len(plan.steps), entries=entries,
                      t_recovered=t2)
        self.record_failure(record)
        self.events.add("bml_replanned", **({"switch": switch} if switch else {"link": link}), epoch=self.epoch,
                        root=plan.root, steps=len(plan.steps), recompute_ms=record["recompute_ms"],
                        install_ms=record["install_ms"])
        return record

    def _install_relay(self) -> int:
        """Each step a star at its switch: its own job id (hosts/bml.py says why), tree id =
        its index, slot region of its own, the relay epoch."""
        entries, window = 0, self._relay_window()
        for step in self.relay.steps:
            client = self.clients[step.switch]
            job = step_job(self.job, step.index)
            ports = [port(self.g, step.switch, h) for h in step.members]
            group = tree_group(job, 0, self.epoch)
            self.groups.setdefault(step.switch, []).append((group, client.mc_group(group, ports)))
            for child, (h, p) in enumerate(zip(step.members, ports)):
                client.table_add(*job_entry(job, step.index, self.epoch, p, child=child, fan_in=len(ports),
                                            mgrp=group, slot_base=step.index * window, slots=window))
                entries += 1
                if (step.switch, p) not in self.replies:
                    ip, mac = interface_address(self.g, h, step.switch)
                    client.table_add("agg_reply", "agg_set_dst", [p], [SERVICE_MAC, SERVICE_IP, mac, ip])
                    self.replies.add((step.switch, p))
                    entries += 1
        return entries

    def _publish(self, status: str, reason: str) -> None:
        """Atomically replace the epoch file the servers watch."""
        tmp = self.epoch_file.with_suffix(".tmp")
        tmp.write_text(json.dumps({"epoch": self.epoch, "status": status, "reason": reason}))
        os.replace(tmp, self.epoch_file)

    def stop(self) -> None:
        with self.locked():
            self.stopped = True
