"""BCube with a failed link or level switch: an in-network allreduce through the servers.

Why: BML's schedule (controller/trees/bml.py) needs every server NIC and every level
switch: a part crosses each level once, inside the group of its level switch. With one
NIC's link or one level switch dead, some group misses a member and no stage can replace
it. BML's servers relay, though (BCube is server-centric), so the schedule is re-planned
over what remains: a spanning tree of the live server-switch graph, in which switches sum
their group (in the data plane, as BML's in-network variant does) and servers relay
between the groups they belong to.

The tree is a breadth-first tree from the live switch with the most live server links;
every switch's *parent* is the server through which the tree reached it (the root has none),
every other member of its group whose first switch in the tree it is, is its *child*. The
allreduce is a sequence of group allreduces (steps), each one star in the data plane:

- reduce, deepest switch first: the switch's child servers contribute what they hold (their
  own input plus the sums of their own child switches so far), the parent server
  contributes zeros and adds the sum to what it holds; at the root every member ends with
  the total;
- broadcast, shallowest first (the root excepted): the parent server contributes the
  total, the children zeros, and every child takes the sum.

Every server runs the steps it is in in this one global order, so the first unfinished step
always has all its members at it: no step waits on a step that waits on it. Integer sums are
exact (each input counted once, zeros elsewhere); simulate_relay checks it on numpy.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import NamedTuple

import networkx as nx
import numpy as np

from agglab.controller.topology import natural_key
from agglab.controller.trees.base import TreeError, is_live


class RelayStep(NamedTuple):
    index: int            # place in the global order; the step's tree id under the relay epoch
    switch: str
    members: tuple        # servers, in child-index order
    phase: str            # "reduce" or "broadcast"
    parent: str | None    # the server that collects (reduce) or gives (broadcast); None at the root


@dataclass(frozen=True)
class RelayPlan:
    root: str
    steps: tuple          # RelayStep, in the global order
    links: frozenset      # the server-switch links the steps use (frozensets of two nodes)

    def uses(self, u: str, v: str) -> bool:
        return frozenset((u, v)) in self.links

    def switches(self) -> set[str]:
        return {s.switch for s in self.steps}


def _live_switch(g: nx.Graph, sw: str) -> bool:
    return g.nodes[sw].get("kind") == "switch" and g.nodes[sw].get("up", True) is not False


def relay_plan(g: nx.Graph, hosts) -> RelayPlan:
    """The relay schedule over the live links and switches of BCube graph `g` for servers
    `hosts`; TreeError when some server can no longer be reached (a partition)."""
    hosts = sorted(hosts, key=natural_key)
    live = {sw: [h for h in sorted(g.neighbors(sw), key=natural_key) if h in hosts and is_live(g, h, sw)]
            for sw in g.nodes if _live_switch(g, sw)}
    if not live or not any(live.values()):
        raise TreeError("no live level switch is left")
    root = max(sorted(live, key=natural_key), key=lambda sw: len(live[sw]))
    parent_of_switch: dict[str, str | None] = {root: None}
    first_switch: dict[str, str] = {}
    depth = {root: 0}
    queue = deque([root])
    while queue:
        sw = queue.popleft()
        for h in live[sw]:
            if h in first_switch:
                continue
            first_switch[h] = sw
            for nxt in sorted((s for s in g.neighbors(h) if s in live and h in live[s]), key=natural_key):
                if nxt not in parent_of_switch:
                    parent_of_switch[nxt], depth[nxt] = h, depth[sw] + 1
                    queue.append(nxt)
    missing = [h for h in hosts if h not in first_switch]
    if missing:
        raise TreeError(f"{', '.join(missing)} can reach no other server over live links and switches")
    groups = {sw: tuple([h for h in live[sw] if first_switch[h] == sw]
                        + ([parent_of_switch[sw]] if parent_of_switch[sw] else []))
              for sw in parent_of_switch}
    groups = {sw: m for sw, m in groups.items() if len(m) >= 2 or parent_of_switch[sw] is None}
    order = sorted(groups, key=lambda sw: (-depth[sw], natural_key(sw)))
    steps = [(sw, "reduce") for sw in order] + [(sw, "broadcast") for sw in reversed(order) if sw != root]
    plan = tuple(RelayStep(i, sw, groups[sw], phase, parent_of_switch[sw]) for i, (sw, phase) in enumerate(steps))
    links = frozenset(frozenset((h, s.switch)) for s in plan for h in s.members)
    return RelayPlan(root, plan, links)


def step_job(job: int, index: int) -> int:
    """The job id step `index` of job `job`'s relay schedule runs under (hosts/bml.py
    allreduce_relay says why each step has its own)."""
    return (job + 1 + index) & 0xFF


def host_steps(plan: RelayPlan, host: str, job: int = 0) -> list[dict]:
    """What server `host` does, step by step (JSON-ready): tree id, switch, its child index
    and the group's size, and its role: "give" (contribute what it holds; at the root and in
    a reduce also take the sum: "give+take"), "collect" (contribute zeros, add the sum),
    "take" (contribute zeros, take the sum)."""
    out = []
    for s in plan.steps:
        if host not in s.members:
            continue
        if s.phase == "reduce":
            role = "collect" if host == s.parent else ("give+take" if s.parent is None else "give")
        else:
            role = "give" if host == s.parent else "take"
        out.append({"tree": s.index, "job": step_job(job, s.index), "switch": s.switch, "rank": s.members.index(host),
                    "fan_in": len(s.members), "role": role, "phase": s.phase})
    return out


def simulate_relay(arrays: dict, plan: RelayPlan) -> dict:
    """Run the relay schedule on {server: 1-D array} in the global order; {server: result}."""
    held = {h: np.array(a, copy=True) for h, a in arrays.items()}
    total: dict = {}
    for s in plan.steps:
        if s.phase == "reduce":
            contrib = {h: (np.zeros_like(held[h]) if h == s.parent else held[h]) for h in s.members}
            got = sum(contrib.values())
            if s.parent is None:
                total.update({h: got.copy() for h in s.members})
            else:
                held[s.parent] = held[s.parent] + got
        else:
            got = total[s.parent]
            total.update({h: got.copy() for h in s.members})
    return {h: total[h] for h in arrays}
