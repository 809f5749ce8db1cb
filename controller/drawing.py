"""Pictures of a topology and the aggregation trees a job uses on it: Graphviz (pydot) for
files, plain text for the lab.

Why Graphviz: `dot` lays nodes out in ranks, which is exactly a data centre's tiers (hosts at
the bottom, then edge/leaf, aggregation, core/spine; BCube's levels above its servers), and
it draws several colours on one link side by side (`color="a:b"`), so a link shared by two
trees shows both. Each tree of a TreeSet gets one colour; its root is drawn as a double
circle in that colour; the legend gives each tree's share of the gradient. Failed links are
dashed. `after_failures` replays failures the way the controller does (the link marked down
in the graph, then `agglab.controller.trees.compute` over live links under the next epoch, only when
an active tree used the link: TreeJob.link_changed / reroute), so a drawing shows the trees a
run would install.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import Path

import networkx as nx

from agglab.controller import trees as tree_algorithms
from agglab.controller.topology import natural_key
from agglab.controller.trees.base import TreeSet, edge_key

# Tableau 10: distinct on screen and in print; a job rarely has more trees than this
PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
           "#bcbd22", "#17becf")
IDLE = "#c8c8c8"          # a link or node no tree uses
DOWN = "#000000"          # a failed link (dashed)

# top to bottom; anything unknown sits just above the hosts
TIER_ORDER = ("core", "spine", "agg", "edge", "leaf")


def tree_colour(index: int) -> str:
    return PALETTE[index % len(PALETTE)]


def tree_name(treeset: TreeSet, index: int) -> str:
    """`tree ID`, or with the index too where ids repeat (BML's per-level groups)."""
    ids = [t.id for t in treeset.trees]
    tid = ids[index]
    return f"tree {tid}" if ids.count(tid) == 1 else f"tree {tid}.{ids[:index].count(tid)}"


def tier_rank(g: nx.Graph, node: str) -> int:
    """0 for the top tier; hosts last. BCube levels: the highest level on top."""
    d = g.nodes[node]
    if d["kind"] == "host":
        return 100
    tier = str(d.get("tier", ""))
    if tier.startswith("level"):
        return 50 - int(d.get("level", tier[5:] or 0))
    return TIER_ORDER.index(tier) if tier in TIER_ORDER else 60


def rate_label(mbps: float | None) -> str:
    if not mbps:
        return ""
    return f"{mbps / 1000:.3g} Gb/s" if mbps >= 1000 else f"{mbps:.3g} Mb/s"


def shaped(g: nx.Graph) -> bool:
    """Whether the links have rates: without any, a tree's `rate` is in made-up units (every
    link counts as 1) and is not shown."""
    return any(d.get("bw") for _, _, d in g.edges(data=True))


def down_links(g: nx.Graph) -> set[tuple[str, str]]:
    return {edge_key(u, v) for u, v, d in g.edges(data=True) if d.get("up", True) is False}


@dataclass(frozen=True)
class Epoch:
    """The trees after one step of a failure script: `failed` is the link that just went
    down (None for the first trees), `down` every link down by then."""
    treeset: TreeSet
    failed: tuple[str, str] | None
    down: frozenset


def after_failures(g: nx.Graph, tree: str, workers: list[str],
                   failures: list[tuple[str, str]] = ()) -> list[Epoch]:
    """The first trees, then the trees after each failure in turn, as the controller computes
    them (see the module docstring). `g` is copied; a failure that partitions the workers
    raises TreeError, as it would make the job report a partition."""
    g = g.copy()                              # new attribute dicts: marking links leaves the caller's
    ts = tree_algorithms.compute(tree, g, workers, epoch=0)
    out = [Epoch(ts, None, frozenset(down_links(g)))]
    for u, v in failures:
        if not g.has_edge(u, v):
            raise ValueError(f"there is no link {u}-{v} in this topology")
        g.edges[u, v]["up"] = False
        if ts.uses(u, v):
            ts = tree_algorithms.compute(tree, g, workers, epoch=ts.epoch + 1)
        out.append(Epoch(ts, edge_key(u, v), frozenset(down_links(g))))
    return out


def to_dot(g: nx.Graph, treeset: TreeSet | None, down=(), title: str = "", workers=()):
    """A pydot graph: nodes ranked by tier, each tree's links in its colour (several trees on
    one link: parallel strokes), roots double-circled, link rates as edge labels, `down`
    links dashed, a legend of tree shares."""
    import pydot  # lazy: pydot, only to_dot() needs it

    down = {edge_key(*e) for e in down} | down_links(g)
    workers = set(workers) or {n for n, d in g.nodes(data=True) if d.get("rank") is not None}
    dot = pydot.Dot(graph_type="graph", rankdir="TB", newrank="true", nodesep="0.25", ranksep="0.9",
                    fontname="Helvetica", fontsize="12", labelloc="t", label=title or g.graph.get("name", ""))
    dot.set_node_defaults(fontname="Helvetica", fontsize="10", style="filled", fillcolor="white")
    dot.set_edge_defaults(fontname="Helvetica", fontsize="7", fontcolor="#555555")
    tree_list = list(treeset.trees) if treeset else []
    on_tree: dict[tuple[str, str], list[int]] = {}
    for i, t in enumerate(tree_list):
        for e in t.edges:
            on_tree.setdefault(e, []).append(i)
    roots = {t.root: i for i, t in enumerate(tree_list)}
    by_rank: dict[int, list[str]] = {}
    for n in sorted(g.nodes, key=natural_key):
        by_rank.setdefault(tier_rank(g, n), []).append(n)
    for rank, names in sorted(by_rank.items()):
        sub = pydot.Subgraph(f"tier{rank}", rank="same")
        for n in names:
            d = g.nodes[n]
            attrs = {"shape": "box" if d["kind"] == "host" else "ellipse", "tooltip": n}
            if d["kind"] == "host":
                attrs.update(fillcolor="#e8f0ff" if n in workers else "white",
                             color="black" if n in workers else IDLE, fontcolor="black" if n in workers else "#999999")
                if d.get("rank") is not None:
                    attrs["xlabel"] = f"r{d['rank']}"
            if n in roots:
                attrs.update(peripheries="2", color=tree_colour(roots[n]), penwidth="2.5",
                             label=f"{n}\nroot")
            if d.get("up", True) is False:
                attrs.update(style="dashed", fontcolor="#999999")
            sub.add_node(pydot.Node(n, **attrs))
        dot.add_subgraph(sub)
    tops = [names[0] for _, names in sorted(by_rank.items())]
    for upper, lower in zip(tops, tops[1:]):     # keeps tiers apart that no link joins (BCube levels)
        dot.add_edge(pydot.Edge(upper, lower, style="invis"))
    for u, v, d in sorted(g.edges(data=True), key=lambda e: (natural_key(e[0]), natural_key(e[1]))):
        a, b = (u, v) if tier_rank(g, u) <= tier_rank(g, v) else (v, u)      # upper tier first
        key = edge_key(u, v)
        used = on_tree.get(key, [])
        attrs = {"label": rate_label(d.get("bw")), "tooltip": f"{a}-{b}"}
        if used:
            attrs.update(color=":".join(tree_colour(i) for i in used), penwidth="2.2")
        else:
            attrs.update(color=IDLE)
        if key in down:
            attrs.update(style="dashed", color=DOWN if not used else attrs["color"], penwidth="1.5",
                         label=(attrs["label"] + " DOWN").strip())
        dot.add_edge(pydot.Edge(a, b, **attrs))
    if tree_list:                   # one table: its rows stack, unlike nodes of one rank
        rows = "".join(
            f'<tr><td bgcolor="{tree_colour(i)}"><font color="white"> {tree_name(treeset, i)} </font></td>'
            f'<td align="left">{t.weight:.1%} of the gradient, root {t.root}'
            f'{", " + rate_label(t.rate) if t.rate and shaped(g) else ""}</td></tr>'
            for i, t in enumerate(tree_list))
        head = f"epoch {treeset.epoch}: {len(tree_list)} tree(s) ({treeset.tree or 'trees'})"
        dot.add_node(pydot.Node("legend", shape="plaintext", style="", label=(
            f'<<table border="0" cellborder="1" cellspacing="0" cellpadding="3">'
            f'<tr><td colspan="2"><b>{head}</b></td></tr>{rows}</table>>')))
    return dot


def positions(g: nx.Graph) -> dict[str, tuple[float, float]]:
    """Each node's place in the tiered layout (points, y growing downwards), for a page that
    draws the topology itself: the same layout as the files."""
    plain = to_dot(g, None).create(prog="dot", format="plain").decode()
    height = 0.0
    out = {}
    for line in plain.splitlines():
        parts = shlex.split(line)
        if parts and parts[0] == "graph":
            height = float(parts[3])
        elif parts and parts[0] == "node" and parts[1] in g:
            out[parts[1]] = (round(float(parts[2]) * 72, 1), round((height - float(parts[3])) * 72, 1))
    return out


FORMATS = ("svg", "png", "dot")


def write(dot, path: str | Path) -> Path:
    """Write by the file's suffix: .svg and .png through Graphviz's `dot`, .dot as text."""
    path = Path(path)
    fmt = path.suffix.lstrip(".").lower()
    if fmt not in FORMATS:
        raise ValueError(f"{path}: the drawing's file must end in .svg, .png or .dot")
    if fmt == "dot":
        path.write_text(dot.to_string())
    else:
        path.write_bytes(dot.create(prog="dot", format=fmt))
    return path


def as_text(g: nx.Graph, treeset: TreeSet, previous: TreeSet | None = None) -> str:
    """The trees as indented text (the lab's `show`): each tree's root and children, down
    links marked `DOWN`, and what changed since `previous` (the last epoch's trees), each tree
    against the old tree it continues (pair_trees)."""
    down = down_links(g)
    lines = [f"epoch {treeset.epoch} ({treeset.tree}): {len(treeset.trees)} tree(s)"
             + (f"; links down: {' '.join(f'{a}-{b}' for a, b in sorted(down))}" if down else "")]
    for i, t in enumerate(treeset.trees):
        rate = f", {rate_label(t.rate)}" if t.rate and shaped(g) else ""
        lines.append(f"tree {t.id}: {t.weight:.1%} of the gradient{rate}, root {t.root}")

        def walk(node: str, prefix: str) -> None:
            kids = t.children(node)
            for k, child in enumerate(kids):
                last = k == len(kids) - 1
                mark = "  DOWN" if edge_key(node, child) in down else ""
                lines.append(f"{prefix}{'`-- ' if last else '|-- '}{child}{mark}")
                walk(child, prefix + ("    " if last else "|   "))
        lines.append(f"  {t.root}")
        walk(t.root, "  ")
    if previous is not None and previous.epoch != treeset.epoch:
        lines.append(f"changed since epoch {previous.epoch}:")
        lines += ["  " + line for line in tree_changes(previous, treeset, down)]
    return "\n".join(lines)


def pair_trees(before, after) -> list[tuple]:
    """Which old tree each new tree continues, as (old, new) pairs: the old tree with the same
    root, else the one sharing the most links, each old tree used once (a maximum-weight
    assignment, scipy's linear_sum_assignment). Why not by index: the algorithms number their
    trees afresh each epoch, so a one-link reroute that reorders them looked like every tree
    replaced. Trees with neither a root nor a link in common stay unpaired: (old, None) is a
    tree removed, (None, new) a new one; new trees keep their order, the removed come last."""
    import numpy as np  # lazy: numpy and scipy, only a diff between epochs needs them
    from scipy.optimize import linear_sum_assignment   # lazy: scipy costs a start-up; only show pairs trees

    before, after = list(before), list(after)
    partner: dict[int, int] = {}
    if before and after:
        root_bonus = 1 + max(len(t.edges) for t in before + after)   # a shared root beats any overlap
        score = np.array([[(root_bonus if old.root == new.root else 0) + len(old.edges & new.edges)
                           for new in after] for old in before])
        for r, c in zip(*linear_sum_assignment(score, maximize=True)):
            if score[r, c] > 0:
                partner[int(c)] = int(r)
    pairs = [(before[partner[j]] if j in partner else None, t) for j, t in enumerate(after)]
    return pairs + [(t, None) for i, t in enumerate(before) if i not in partner.values()]


def tree_changes(previous: TreeSet, treeset: TreeSet, down=frozenset()) -> list[str]:
    """One line per tree: what changed from the tree it continues (pair_trees): its root, the
    links gone (`(down)` when they failed) and added, its share."""
    lines = []
    for before, t in pair_trees(previous.trees, treeset.trees):
        if before is None:
            lines.append(f"tree {t.id}: new, root {t.root}")
            continue
        if t is None:
            lines.append(f"tree {before.id}: removed (it had root {before.root})")
            continue
        what = [f"root {before.root} -> {t.root}"] if before.root != t.root else []
        what += [f"-{a}-{b}" + (" (down)" if (a, b) in down else "") for a, b in sorted(before.edges - t.edges)]
        what += [f"+{a}-{b}" for a, b in sorted(t.edges - before.edges)]
        if abs(before.weight - t.weight) > 5e-4:
            what.append(f"share {before.weight:.1%} -> {t.weight:.1%}")
        was = f" (was tree {before.id})" if before.id != t.id else ""
        lines.append(f"tree {t.id}{was}: " + (", ".join(what) if what else "unchanged"))
    return lines
