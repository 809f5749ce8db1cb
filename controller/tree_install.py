"""Install a job's aggregation trees (a TreeSet at one epoch) into the switches.

Mirrors p4src/include/job.p4 for multi-switch trees: on every switch of every tree,
each child port gets agg_child (root) or agg_child_of (non-root, with the parent
port), the parent port gets agg_from_parent, and a multicast group per (job, tree)
replicates results to the children. All port numbers come from the shared graph.
One agg_job entry serves the dense and the sparse pipeline (the data plane looks it
up before it branches on AGG_FLAG_SPARSE); entries are built by
agglab.controller.aggregate.job_entry.

Handles are remembered so the epoch can be frozen (its agg_job entries deleted)
before the next one is installed.
"""

from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import dataclass, field
from functools import partial

import networkx as nx

from agglab.ground import wire
from agglab.controller.addressing import interface_address
from agglab.controller.aggregate import job_entry
from agglab.ground.addresses import SERVICE_IP, SERVICE_MAC
from agglab.controller.switch_client import SwitchClient, parse_handle, table_add_line
from agglab.controller.topology import natural_key, port

GROUP_BASE = 2000          # multicast groups of trees: GROUP_BASE + 64*job + tree (epoch-parity offset)


MAX_TREES = 64             # a job's groups: 2 per tree (alternating epochs) within its 128
MAX_PORT = 510             # P4 ports are bit<9>, and BMv2 drops what goes to port 511



def reply_dst(g, child: str, sw: str) -> tuple[str, str]:
    """(MAC, IP) a result sent down to `child` is addressed to: the host's own address on its
    link to `sw`, or the aggregation service address when the child is a switch."""
    if g.nodes[child]["kind"] == "host":
        ip, mac = interface_address(g, child, sw)
        return mac, ip
    return SERVICE_MAC, SERVICE_IP

def check_fits(g: nx.Graph, treeset) -> None:
    """Raise ValueError (one line) unless the trees fit the data plane: at most
    AGG_MAX_WORKERS children per switch and tree (the contribution bitmap's width, also the
    sparse pipeline's per-child registers) and MAX_TREES trees per job. Pure: the session
    calls it on the first trees before any network is built."""
    if len(treeset.trees) > MAX_TREES:
        raise ValueError(f"{len(treeset.trees)} trees, but a job's multicast groups hold {MAX_TREES}")
    for (sw, tree_id), role in sorted(roles_of(treeset, g).items(), key=lambda kv: natural_key(kv[0][0])):
        if len(role.children) > wire.MAX_WORKERS:
            raise ValueError(f"switch {sw} would aggregate {len(role.children)} children on tree {tree_id}, but "
                             f"its contribution bitmap holds {wire.MAX_WORKERS} (AGG_MAX_WORKERS): fewer workers "
                             "per switch (more racks, a fat-tree) or fewer workers")


def tree_group(job: int, tree: int, epoch: int) -> int:
    """Alternating group ids per epoch, so the next epoch's group exists before the old one goes."""
    return GROUP_BASE + 128 * job + 2 * tree + (epoch & 1)


@dataclass
class SwitchRole:
    """What one switch does for one tree."""
    switch: str
    tree: int
    root: bool
    children: list[str]
    parent: str | None


@dataclass
class Installation:
    """Everything installed for one epoch, so it can be frozen and removed."""
    epoch: int
    roles: dict = field(default_factory=dict)        # (switch, tree) -> SwitchRole
    job_handles: dict = field(default_factory=lambda: defaultdict(list))   # switch -> agg_job handles
    groups: dict = field(default_factory=lambda: defaultdict(list))        # switch -> [(group, node handle)]
    entries: int = 0
    seconds: float = 0.0


def roles_of(treeset, g: nx.Graph) -> dict:
    roles = {}
    for tree in treeset.trees:
        for node in tree.nodes:
            if g.nodes[node]["kind"] != "switch":
                continue
            roles[node, tree.id] = SwitchRole(node, tree.id, tree.parent[node] is None,
                                              tree.children(node), tree.parent[node])
    return roles


def install(clients: dict[str, SwitchClient], g: nx.Graph, treeset, job: int = 0,
            slot_base: int = 0, reply_ports: dict | None = None, slots: int | None = None,
            ranks: dict[str, int] | None = None) -> Installation:
    """Install every tree of `treeset` at `treeset.epoch`. `reply_ports` (switch -> set of
    ports with an agg_reply entry) is updated so entries are added once per port.

    The job owns slots slot_base .. slot_base + slots - 1 (default: all from slot_base on);
    `ranks` (worker host -> rank in the job) makes each worker's port admit only packets
    that carry that rank (a host may not contribute for another)."""
    started = time.monotonic()
    inst = Installation(epoch=treeset.epoch, roles=roles_of(treeset, g))
    reply_ports = {} if reply_ports is None else reply_ports
    for (sw, tree_id), role in sorted(inst.roles.items(), key=lambda kv: (natural_key(kv[0][0]), kv[0][1])):
        if len(role.children) > wire.MAX_WORKERS:
            raise ValueError(f"{sw} has {len(role.children)} children on tree {tree_id}; max {wire.MAX_WORKERS}")
        client = clients[sw]
        ports = [port(g, sw, c) for c in role.children]
        group = tree_group(job, tree_id, treeset.epoch)
        inst.groups[sw].append((group, client.mc_group(group, ports)))
        parent_port = None if role.root else port(g, sw, role.parent)
        entry = partial(job_entry, job, tree_id, treeset.epoch, fan_in=len(ports), mgrp=group, slot_base=slot_base,
                        slots=slots)
        for child, (c, p) in enumerate(zip(role.children, ports)):
            rank = (ranks or {}).get(c)
            inst.job_handles[sw].append(client.table_add(*entry(p, child=child, parent_port=parent_port,
                                                                worker=rank)))
            done = reply_ports.setdefault(sw, set())
            if p not in done:
                client.table_add("agg_reply", "agg_set_dst", [p], [SERVICE_MAC, SERVICE_IP, *reply_dst(g, c, sw)])
                done.add(p)
                inst.entries += 1
        if not role.root:
            inst.job_handles[sw].append(client.table_add(*entry(parent_port)))
        inst.entries += len(ports) + (0 if role.root else 1) + 1
    inst.seconds = time.monotonic() - started
    return inst


@dataclass
class InstallPlan:
    """An installation as command lines, for switches whose batches are atomic
    (SwitchClient.atomic_batches): `lines` (per switch: groups created, nodes created,
    agg_job and agg_reply entries added) go out first, possibly in one batch with other
    work; `finish(outputs)` takes their answers (handles) and returns the lines that
    complete it (nodes associated with their groups)."""
    inst: Installation
    lines: dict = field(default_factory=lambda: defaultdict(list))
    kinds: dict = field(default_factory=lambda: defaultdict(list))    # per line: what its answer holds

    def add(self, sw: str, line: str, kind: tuple = ()) -> None:
        self.lines[sw].append(line)
        self.kinds[sw].append(kind)

    def finish(self, outputs: dict[str, list[str]]) -> dict[str, list[str]]:
        """`outputs`: per switch the answers to its `lines`, in order (or a longer list
        ending with them: a batch that had other lines first)."""
        associate: dict[str, list[str]] = defaultdict(list)
        for sw, kinds in self.kinds.items():
            outs = outputs[sw][len(outputs[sw]) - len(kinds):]
            for kind, out in zip(kinds, outs):
                if kind and kind[0] == "job":
                    self.inst.job_handles[sw].append(parse_handle(sw, "table_add agg_job", out))
                elif kind and kind[0] == "node":
                    handle = parse_handle(sw, "mc_node_create", out)
                    self.inst.groups[sw].append((kind[1], handle))
                    associate[sw].append(f"mc_node_associate {kind[1]} {handle}")
        return associate


def plan(g: nx.Graph, treeset, job: int = 0, slot_base: int = 0, reply_ports: dict | None = None,
         slots: int | None = None, ranks: dict[str, int] | None = None) -> InstallPlan:
    """install() as command lines (InstallPlan): same entries, same order."""
    started = time.monotonic()
    out = InstallPlan(Installation(epoch=treeset.epoch, roles=roles_of(treeset, g)))
    inst = out.inst
    reply_ports = {} if reply_ports is None else reply_ports
    for (sw, tree_id), role in sorted(inst.roles.items(), key=lambda kv: (natural_key(kv[0][0]), kv[0][1])):
        if len(role.children) > wire.MAX_WORKERS:
            raise ValueError(f"{sw} has {len(role.children)} children on tree {tree_id}; max {wire.MAX_WORKERS}")
        ports = [port(g, sw, c) for c in role.children]
        group = tree_group(job, tree_id, treeset.epoch)
        out.add(sw, f"mc_mgrp_create {group}")
        out.add(sw, f"mc_node_create 0 {' '.join(str(p) for p in sorted(ports))}", ("node", group))
        parent_port = None if role.root else port(g, sw, role.parent)
        entry = partial(job_entry, job, tree_id, treeset.epoch, fan_in=len(ports), mgrp=group, slot_base=slot_base,
                        slots=slots)
        for child, (c, p) in enumerate(zip(role.children, ports)):
            out.add(sw, table_add_line(*entry(p, child=child, parent_port=parent_port, worker=(ranks or {}).get(c))),
                    ("job",))
            done = reply_ports.setdefault(sw, set())
            if p not in done:
                out.add(sw, table_add_line("agg_reply", "agg_set_dst", [p],
                                           [SERVICE_MAC, SERVICE_IP, *reply_dst(g, c, sw)]))
                done.add(p)
                inst.entries += 1
        if not role.root:
            out.add(sw, table_add_line(*entry(parent_port)), ("job",))
        inst.entries += len(ports) + (0 if role.root else 1) + 1
    inst.seconds = time.monotonic() - started
    return out


def freeze_lines(inst: Installation, clients: dict[str, SwitchClient] | None = None) -> dict[str, list[str]]:
    """freeze() as command lines per switch (the handles are forgotten): each client's
    table_delete_lines (one command on the software switch), or one `table_delete` a handle."""
    lines = {sw: (clients[sw].table_delete_lines("agg_job", handles) if clients else
                  [f"table_delete agg_job {h}" for h in handles]) for sw, handles in inst.job_handles.items()}
    inst.job_handles.clear()
    return lines


def freeze(clients: dict[str, SwitchClient], inst: Installation) -> int:
    """Delete the epoch's agg_job entries: its packets now miss and never touch state."""
    removed = 0
    for sw, handles in inst.job_handles.items():
        clients[sw].commands([f"table_delete agg_job {h}" for h in handles])
        removed += len(handles)
    inst.job_handles.clear()
    return removed


def remove_groups(clients: dict[str, SwitchClient], inst: Installation) -> None:
    """Drop the epoch's multicast groups once the next epoch is installed."""
    for sw, lines in remove_groups_lines(inst).items():
        clients[sw].commands(lines)


def remove_groups_lines(inst: Installation) -> dict[str, list[str]]:
    """remove_groups() as command lines per switch (the groups are forgotten)."""
    out = {}
    for sw, groups in inst.groups.items():
        out[sw] = [line for group, handle in groups for line in (
            f"mc_node_dissociate {group} {handle}", f"mc_node_destroy {handle}", f"mc_mgrp_destroy {group}")]
    inst.groups.clear()
    return out
