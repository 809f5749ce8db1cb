"""Programs p4src/include/policer.p4: ports that lead to a host in no job are metered.

Why: a host in no job has no agg_job entry, so its aggregation frames are all rejected, but
each one still costs the switch a parse and a lookup: a flood from such a host took the
switch's time from the running jobs (64k frames/s cut a job to 29% of its rate on the
software switch). Its port now runs a meter first, and frames over the meter's peak rate
are dropped before anything else looks at them (counted as `rejected_policed`).

Which ports: every switch port whose neighbour is a host that is no job's worker. Ports
to switches are never policed (every job's partials and results cross them, and a reroute
may move a job onto any of them), nor ports to workers (their frames are the jobs').

The rate: POLICE_PPS frames per second with a burst of POLICE_BURST, committed and peak
alike (BMv2 takes packets per microsecond). A host in no job has no business sending
aggregation frames at all; what it may still need is a little plain traffic (ARP, a ping, a
lab user's probe), which this leaves room for. A job's own frames are tens of thousands per
second, so the flood that passes the meter is a few per cent of a switch's work.
"""

from __future__ import annotations

import networkx as nx

from agglab.controller.switch_client import SwitchClient, table_add_line

POLICE_PPS = 1000
POLICE_BURST = 100


def policed_ports(g: nx.Graph, sw: str, job_hosts: set[str]) -> list[int]:
    """The ports of switch `sw` that lead to a host in no job."""
    return sorted(e["ports"][sw] for _, nbr, e in g.edges(sw, data=True)
                  if g.nodes[nbr].get("kind") == "host" and nbr not in job_hosts)


def policer_lines(ports: list[int], pps: float = POLICE_PPS, burst: int = POLICE_BURST) -> list[str]:
    """The switch's port_policer entries and meter rates (replacing earlier ones)."""
    rate = f"{pps / 1e6:.9f}:{int(burst)}"
    lines = ["table_clear port_policer"]
    for p in ports:
        lines += [table_add_line("port_policer", "police", [p], []), f"meter_set_rates port_meter {p} {rate} {rate}"]
    return lines


def unpolice(client: SwitchClient) -> None:
    """No port policed any more (the fuzzing harness counts every frame's reason)."""
    client.command("table_clear port_policer")
