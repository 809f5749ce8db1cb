"""BML on BCube(n,k): the (k+1)-stage schedule as explicit data, and a numpy simulator.

With L = k+1 levels and N = n^L servers, the gradient is cut into L parts (one per NIC)
and every part into N pieces; piece p belongs to the server whose address equals p's
base-n digits. Part j visits the levels in the order (j+s) mod L at stage s, so in every
stage the L parts use L different NICs — no NIC carries two parts at once.

Reduce-scatter, stage s, part j, level l = (j+s) mod L: a server x holds the pieces that
agree with x on the levels already visited; it sends each such piece p with p[l] != x[l]
to the member of its level-l group whose digit l is p[l] (one hop through the level-l
switch), and adds what it receives. After L stages x holds piece x of every part, summed
over all N servers. All-gather runs the levels back in reverse: x sends every piece it
has to the other members of its level-l group, which copy it.

In-network variant (ours, not the paper's): at stage s the level-l switch of each group
sums the members' part j and multicasts the sum back, an allreduce inside the group; after
L stages every server has the total, with no all-gather. Its steps are (part, level,
switch, members); as a TreeSet each level switch is a star whose tree id is its level, so
a host's packet for part j at stage s carries tree (j+s) mod L.

Why explicit data: the agents, the controller and the tests read the same schedule, and
simulate_bml proves it computes the exact sum with every transfer one switch hop.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import networkx as nx
import numpy as np

from agglab.controller.topology import hosts as all_hosts, natural_key
from agglab.controller.trees.base import Tree, TreeError, TreeSet, check_tree, is_live


class Transfer(NamedTuple):
    src: str
    dst: str
    part: int
    piece: int
    via: str          # the level switch both hosts hang off
    level: int
    op: str           # "reduce" (dst adds) or "gather" (dst copies)


class GroupStep(NamedTuple):
    part: int
    level: int
    switch: str
    members: tuple    # ordered by the members' digit at this level


@dataclass(frozen=True)
class BmlSchedule:
    n: int
    k: int
    hosts: tuple              # hosts[i] has address i (base n, digit l = level l)
    stages: tuple             # 2L stages of Transfers: L reduce-scatter, then L all-gather
    in_network: tuple         # L stages of GroupSteps

    @property
    def levels(self) -> int:
        return self.k + 1

    def level(self, part: int, stage: int) -> int:
        """Level (= NIC) part `part` uses at reduce-scatter stage `stage`."""
        return (part + stage) % self.levels


def _digits(i: int, n: int, levels: int) -> tuple:
    return tuple((i // n ** l) % n for l in range(levels))


def _with_digit(i: int, n: int, level: int, digit: int) -> int:
    return i + (digit - (i // n ** level) % n) * n ** level


def schedule(g: nx.Graph) -> BmlSchedule:
    """Build the schedule for a BCube graph from agglab.controller.topologies.bcube (all links live)."""
    if g.graph.get("topology") != "bcube":
        raise TreeError("bml needs a BCube topology (agglab.controller.topologies.bcube / --topology bcube)")
    n, k = g.graph["n"], g.graph["k"]
    levels, count = k + 1, n ** (k + 1)
    by_index = {sum(d * n ** l for l, d in enumerate(g.nodes[h]["address"])): h for h in all_hosts(g)}
    order = tuple(by_index[i] for i in range(count))
    switch_of: dict = {}
    for i, h in enumerate(order):
        for l in range(levels):
            sw = [s for s in g.neighbors(h) if g.nodes[s]["kind"] == "switch" and g.nodes[s].get("level") == l]
            if len(sw) != 1 or not is_live(g, h, sw[0]):
                raise TreeError(f"{h} has no live level-{l} link; BML's schedule needs every NIC")
            switch_of[i, l] = sw[0]
    stages = []
    for s in range(levels):                                   # reduce-scatter
        stage = []
        for j in range(levels):
            l = (j + s) % levels
            seen = [(j + t) % levels for t in range(s)]
            for x in range(count):
                dx = _digits(x, n, levels)
                for p in range(count):
                    dp = _digits(p, n, levels)
                    if dp[l] != dx[l] and all(dp[v] == dx[v] for v in seen):
                        y = _with_digit(x, n, l, dp[l])
                        stage.append(Transfer(order[x], order[y], j, p, switch_of[x, l], l, "reduce"))
        stages.append(tuple(stage))
    for s in range(levels):                                   # all-gather, levels reversed
        stage = []
        for j in range(levels):
            l = (j + levels - 1 - s) % levels
            open_levels = {(j + levels - 1 - t) % levels for t in range(s)}
            for x in range(count):
                dx = _digits(x, n, levels)
                held = [p for p in range(count)
                        if all(_digits(p, n, levels)[v] == dx[v] for v in range(levels) if v not in open_levels)]
                for d in range(n):
                    if d != dx[l]:
                        y = _with_digit(x, n, l, d)
                        stage.extend(Transfer(order[x], order[y], j, p, switch_of[x, l], l, "gather")
                                     for p in held)
        stages.append(tuple(stage))
    in_network = []
    for s in range(levels):
        steps = []
        for j in range(levels):
            l = (j + s) % levels
            groups: dict = {}
            for x in range(count):
                groups.setdefault(switch_of[x, l], []).append((_digits(x, n, levels)[l], order[x]))
            for sw in sorted(groups, key=natural_key):
                steps.append(GroupStep(j, l, sw, tuple(h for _, h in sorted(groups[sw]))))
        in_network.append(tuple(steps))
    return BmlSchedule(n, k, order, tuple(stages), tuple(in_network))


def _split(array: np.ndarray, sched: BmlSchedule) -> list:
    count = len(sched.hosts)
    return [np.array_split(part, count) for part in np.array_split(np.asarray(array), sched.levels)]


def _join(parts: list) -> np.ndarray:
    return np.concatenate([np.concatenate(pieces) for pieces in parts])


def simulate_bml(arrays: dict, sched: BmlSchedule) -> dict:
    """Run the host-based schedule on {host: 1-D array}; returns {host: result}.

    Every stage reads the values senders held at the start of that stage, as the real
    transfers of one stage run concurrently.
    """
    if set(arrays) != set(sched.hosts):
        raise ValueError("need exactly one array per BCube server")
    state = {h: _split(a, sched) for h, a in arrays.items()}
    for stage in sched.stages:
        before = {h: [list(pieces) for pieces in parts] for h, parts in state.items()}
        for t in stage:
            value = before[t.src][t.part][t.piece]
            cell = state[t.dst][t.part]
            cell[t.piece] = cell[t.piece] + value if t.op == "reduce" else value.copy()
    return {h: _join(parts) for h, parts in state.items()}


def simulate_in_network(arrays: dict, sched: BmlSchedule) -> dict:
    """Run the in-network variant: each step sums the members' part at the switch and
    hands every member the sum."""
    if set(arrays) != set(sched.hosts):
        raise ValueError("need exactly one array per BCube server")
    state = {h: [np.asarray(p) for p in np.array_split(np.asarray(a), sched.levels)]
             for h, a in arrays.items()}
    for stage in sched.in_network:
        for step in stage:
            total = sum(state[h][step.part] for h in step.members)
            for h in step.members:
                state[h][step.part] = total.copy()
    return {h: np.concatenate(parts) for h, parts in state.items()}


def compute(g: nx.Graph, workers, seed: int = 0) -> TreeSet:
    """The schedule plus one star tree per level switch (tree id = level; weights nominal
    and equal, because BML does not split the tensor across these trees — the schedule
    says which part crosses which level when). `seed` is unused."""
    sched = schedule(g)
    if sorted(workers, key=natural_key) != sorted(sched.hosts, key=natural_key):
        raise TreeError("bml sums over every BCube server: make all of them workers")
    stars = {}
    for stage in sched.in_network:
        for step in stage:
            stars.setdefault(step.switch, step)
    trees = []
    for sw in sorted(stars, key=natural_key):
        step = stars[sw]
        parent = {sw: None, **{h: sw for h in step.members}}
        trees.append(Tree.from_parent(step.level, sw, parent, weight=1.0 / len(stars)))
        check_tree(g, trees[-1], step.members)
    return TreeSet(trees=tuple(trees), tree="bml", schedule=sched,
                   meta={"n": sched.n, "k": sched.k, "levels": sched.levels,
                         "stages": len(sched.stages), "transfers": sum(len(s) for s in sched.stages)})
