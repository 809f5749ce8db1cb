"""Programs p4src/include/aggregate.p4: a job's aggregation config on one switch.

Mirrors the P4 control: agg_job (which ingress ports are children, their index,
fan-in, multicast group, slot region), the job's multicast group, agg_reply (how a
result is addressed to each child) and the registers (reset, read back).
"""

from __future__ import annotations

from dataclasses import dataclass

import networkx as nx

from agglab import wire
from controller.addressing import SERVICE_IP, SERVICE_MAC
from controller.switch_client import SwitchClient
from controller.topology import port

REGISTERS = ("agg_values", "agg_bitmap", "agg_count", "agg_exp")
STATS = ("contributions", "completions", "dup_dropped", "dup_answered", "rejected", "sim_dropped")


def job_group(job: int) -> int:
    """Multicast group of a job's results (1 + job; group FLOOD_GROUP is L2 flooding)."""
    return 1 + job


@dataclass
class JobConfig:
    job: int = 0
    tree: int = 0
    epoch: int = 0
    slot_base: int = 0


def install_single_switch_job(client: SwitchClient, g: nx.Graph, switch: str,
                              workers: list[str], cfg: JobConfig) -> None:
    """Make `switch` the only aggregator of `workers` (child index = position in list)."""
    if len(workers) > wire.MAX_WORKERS:
        raise ValueError(f"at most {wire.MAX_WORKERS} workers per aggregator, got {len(workers)}")
    ports = [port(g, switch, w) for w in workers]
    group = job_group(cfg.job)
    for child, (w, p) in enumerate(zip(workers, ports)):
        client.table_add("agg_job", "agg_child", [cfg.job, cfg.tree, cfg.epoch, p],
                         [child, len(workers), group, cfg.slot_base])
        attrs = g.nodes[w]
        client.table_add("agg_reply", "agg_set_dst", [p],
                         [SERVICE_MAC, SERVICE_IP, attrs["mac"], attrs["ip"]])
    client.mc_group(group, ports)


def reset_state(client: SwitchClient) -> None:
    for name in REGISTERS:
        client.register_reset(name)


def read_stats(client: SwitchClient) -> dict[str, int]:
    """The agg_stats counter by name (indices STAT_* in constants.p4)."""
    return {name: client.counter_read("agg_stats", i) for i, name in enumerate(STATS)}
