"""Programs and reads the aggregation state of p4src (job.p4, aggregate.p4, sparse.p4).

The agg_job/agg_reply entries of a job are installed per tree and epoch by
controller/tree_install.py (a single switch is the one-node tree) and by
controller/bml_job.py; both build the agg_job entry with `job_entry`, the one place
its format is written. It lives with the data plane's own description of that table
(softswitch/roles.py, one layer down, so the star and test harnesses of the software
switch use the same function) and is re-exported here for the controller. This module
also holds what every job reads: the aggregation counters (registers are reset and
preloaded by controller/reroute/failover.py and controller/reroute/carry.py).
"""

from __future__ import annotations

from agglab.controller.switch_client import SwitchClient, parse_counter
from agglab.softswitch.roles import REJECTS, JobEntry, job_entry  # noqa: F401 (the controller's name for them)

STATS = ("contributions", "completions", "dup_dropped", "dup_answered", "rejected", "sim_dropped", "dup_up",
         "sp_held")


def read_stats(client: SwitchClient) -> dict[str, int]:
    """The agg_stats counter by name (indices STAT_* in constants.p4), then why the rejected
    packets were rejected: agg_rejects as `rejected_<reason>` (REJ_* in constants.p4)."""
    stats = {name: client.counter_read("agg_stats", i) for i, name in enumerate(STATS)}
    stats.update(read_rejects(client))
    return stats


def stats_lines() -> list[str]:
    """read_stats as one batch of control lines (for a batch to many switches at once)."""
    return ([f"counter_read agg_stats {i}" for i in range(len(STATS))]
            + [f"counter_read agg_rejects {i}" for i in range(len(REJECTS))])


def parse_stats(switch: str, outs: list[str]) -> dict[str, int]:
    """The answers to stats_lines(), named as read_stats names them."""
    values = [parse_counter(switch, out) for out in outs]
    names = [*STATS, *(f"rejected_{name}" for name in REJECTS)]
    return dict(zip(names, values))


def read_rejects(client: SwitchClient) -> dict[str, int]:
    """The agg_rejects counter: rejected packets by reason, keys `rejected_<reason>`."""
    return {f"rejected_{name}": client.counter_read("agg_rejects", i) for i, name in enumerate(REJECTS)}
