"""Programs and reads p4src/include/aggregate.p4's state: registers and the agg_stats counter.

The agg_job/agg_reply entries of a job are installed per tree and epoch by
controller/tree_install.py (a single switch is the one-node tree); this module holds
what every job reads: the aggregation counters (registers are reset and preloaded by
controller/failover.py).
"""

from __future__ import annotations

from controller.switch_client import SwitchClient

STATS = ("contributions", "completions", "dup_dropped", "dup_answered", "rejected", "sim_dropped", "dup_up")


def read_stats(client: SwitchClient) -> dict[str, int]:
    """The agg_stats counter by name (indices STAT_* in constants.p4)."""
    return {name: client.counter_read("agg_stats", i) for i, name in enumerate(STATS)}
