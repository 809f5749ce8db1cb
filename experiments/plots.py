"""One figure per trend, in the paper's comparison, with flagged runs marked as such.

Why every plot marks CPU-bound points: a time measured while the emulator, not the link,
was the bottleneck says nothing about the network (emulation/fidelity.py); such a point is
drawn as a red cross and the legend says "CPU-bound (flagged)". Times are in the real
network's units (the axis label says so). `Figure` + Agg: no display, no global state.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import networkx as nx
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import NullFormatter, ScalarFormatter

from agglab.controller import topologies, trees
from agglab.experiments.analysis import scale_groups, select
from agglab.experiments.definition import Definition
from agglab.experiments.jobs_report import occupancy_plot
from agglab.experiments.tree_drawings import write_tree_drawings     # the trees the numbers are about
from agglab.experiments.units import format_rate, parse_rate
from agglab.ground.runspec import RunSpec

NO_RUN = "no run finished: each row's error is in the report's table"


def _xlabels(values: list) -> tuple[list, list[str], bool]:
    """Numeric x values as they are; anything else (failure lists, patterns) as categories."""
    numeric = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)
    if numeric:
        return list(values), [str(v) for v in values], True
    labels = [("none" if v == [] else "+".join(v)) if isinstance(v, list) else str(v) for v in values]
    return list(range(len(values))), labels, False


def _others(d: Definition) -> list[dict[str, Any]]:
    """Combinations of the sweep keys other than x: one line each per series."""
    keys = [k for k in d.sweep if k != d.x]
    combos = [{}]
    for k in keys:
        combos = [{**c, k: v} for c in combos for v in d.sweep[k]]
    return combos


def _save(fig: Figure, path: Path) -> Path:
    FigureCanvasAgg(fig)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return path


def _flag_legend(ax, any_flagged: bool) -> None:
    """The legend, or, when no run finished (every row an error), a line saying so: an empty
    plot with no word would look like a drawing fault rather than a suite that failed."""
    if any_flagged:
        ax.plot([], [], "x", color="red", markersize=10, label="CPU-bound (flagged)")
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7)
    else:
        ax.text(0.5, 0.5, NO_RUN, transform=ax.transAxes, ha="center", va="center", fontsize=9)


def time_plot(rows: list[dict], d: Definition, path: Path) -> Path:
    fig = Figure(figsize=(6.4, 4.2))
    ax = fig.add_subplot()
    xs, labels, numeric = _xlabels(d.sweep[d.x])
    flagged = False
    for other in _others(d):
        for s in d.series:
            pts = [(x, select(rows, d, {"series": s, d.x: v, **other})) for x, v in zip(xs, d.sweep[d.x])]
            pts = [(x, st) for x, st in pts if st.runs]
            if not pts:
                continue
            tag = " ".join(f"{k}={v}" for k, v in other.items())
            ax.errorbar([x for x, _ in pts], [st.median * 1e3 for _, st in pts],
                        yerr=[[(st.median - st.low) * 1e3 for _, st in pts],
                              [(st.high - st.median) * 1e3 for _, st in pts]],
                        marker="o", capsize=3, label=f"{s} {tag}".strip())
            bad = [(x, st.median * 1e3) for x, st in pts if st.flagged]
            if bad:
                flagged = True
                ax.plot([b[0] for b in bad], [b[1] for b in bad], "x", color="red", markersize=10)
    ax.set_xticks(xs, labels, rotation=0 if numeric else 20, fontsize=8)
    ax.set_xlabel(d.x if d.x != "fail" else "link failures during the run (link@fraction of blocks done)")
    what = "training iteration" if d.program == "pace" else "allreduce"
    ax.set_ylabel(f"{what} time, real network (ms)")
    ax.set_title(f"{d.title}\n{format_rate(parse_rate(d.network['link']))} links, "
                 f"{d.network.get('gradient', 'each model’s')} gradient (scaled; medians, min-max)", fontsize=9)
    _flag_legend(ax, flagged)
    return _save(fig, path)


def speedup_plot(rows: list[dict], d: Definition, path: Path) -> Path:
    """The first series' speed-up over every other series against x, with the 1/x line."""
    fig = Figure(figsize=(6.4, 4.2))
    ax = fig.add_subplot()
    subject, *bases = list(d.series)
    xs = d.sweep[d.x]
    flagged = False
    for other in _others(d):
        tag = " ".join(f"{k}={v}" for k, v in other.items())
        for base in bases:
            pts = []
            for v in xs:
                a = select(rows, d, {"series": subject, d.x: v, **other})
                b = select(rows, d, {"series": base, d.x: v, **other})
                if a.runs and b.runs:
                    pts.append((v, b.median / a.median, bool(a.flagged or b.flagged)))
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=f"{subject} vs {base} {tag}")
                bad = [p for p in pts if p[2]]
                flagged |= bool(bad)
                ax.plot([p[0] for p in bad], [p[1] for p in bad], "x", color="red", markersize=10)
    ax.plot(xs, [1 / v for v in xs], "k--", label="1/density (paper: speed-up when links bind)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel(d.x)
    ax.set_ylabel("speed-up (time of other / time of " + subject + ")")
    ax.set_title(d.title, fontsize=9)
    _flag_legend(ax, flagged)
    return _save(fig, path)


def scale_plot(rows: list[dict], d: Definition, path: Path) -> Path:
    """Each claim's ratio against d.x (workers), beside this network's bound at each size
    (dashed) and the paper's figure (dotted): whether the emulator follows its own network's
    bound as it grows, and how far that network is from the paper's setting."""
    fig = Figure(figsize=(7.2, 4.4))
    ax = fig.add_subplot()
    colours = ["tab:blue", "tab:orange", "tab:green", "tab:purple", "tab:brown"]
    flagged = False
    for i, (text, vs) in enumerate(scale_groups(rows, d).items()):
        colour = colours[i % len(colours)]
        xs = [v.claim.num[d.x] for v in vs]
        ours = [(x, v) for x, v in zip(xs, vs) if v.ours == v.ours]
        if ours:
            ax.errorbar([x for x, _ in ours], [v.ours for _, v in ours],
                        yerr=[[v.ours - v.low for _, v in ours], [v.high - v.ours for _, v in ours]],
                        marker="o", capsize=3, color=colour, label=f"{text}: ours")
            bad = [(x, v.ours) for x, v in ours if v.flagged]
            flagged |= bool(bad)
            ax.plot([b[0] for b in bad], [b[1] for b in bad], "x", color="red", markersize=10)
        bound = [(x, v.bound) for x, v in zip(xs, vs) if v.bound == v.bound]
        if bound:
            ax.plot([b[0] for b in bound], [b[1] for b in bound], "--", marker="s", markersize=4, color=colour,
                    label="bound (this network)")
        ax.plot(xs, [v.claim.paper for v in vs], ":", color=colour, label=f"paper ({vs[0].claim.paper:g})")
    values = d.sweep[d.x]
    if all(isinstance(v, (int, float)) and v > 0 for v in values):
        ax.set_xscale("log", base=2)
    ax.set_xticks(values, [str(v) for v in values])
    ax.set_yscale("log")
    ax.yaxis.set_major_formatter(ScalarFormatter())
    ax.yaxis.set_minor_formatter(NullFormatter())
    ax.set_xlabel(d.x)
    ax.set_ylabel("ratio of allreduce times")
    ax.set_title(f"{d.title}\nratio vs {d.x}: ours (medians, min–max), this network's bound, the paper's figure",
                 fontsize=8)
    _flag_legend(ax, flagged)
    return _save(fig, path)


def _tier_layout(g) -> dict:
    """Switch tiers top-down (spine, aggregation/core, leaf/edge), hosts at the bottom, each
    row in name order; graphs without tiers fall back to a seeded spring layout."""
    order = {"core": 3, "spine": 3, "agg": 2, "aggregation": 2, "leaf": 1, "edge": 1}
    if not all(g.nodes[n].get("kind") == "host" or g.nodes[n].get("tier") in order for n in g):
        return nx.spring_layout(g, seed=0)
    rows: dict[int, list] = {}
    for n in g:
        rows.setdefault(0 if g.nodes[n].get("kind") == "host" else order[g.nodes[n]["tier"]], []).append(n)
    pos = {}
    for y, names in rows.items():
        names.sort(key=topologies.natural_key)
        for i, n in enumerate(names):
            pos[n] = ((i + 0.5) / len(names), y)
    return pos


def _packed(spec_dict: dict):
    """(graph, packed trees, slow links) of one packing run, recomputed from its own topology."""
    spec = RunSpec.from_dict(spec_dict)
    g = topologies.for_run(spec)
    fastest = max((e.get("bw") or 0) for _, _, e in g.edges(data=True))
    slow = {(u, v) for u, v, e in g.edges(data=True) if e.get("bw") and e["bw"] < fastest}
    return g, trees.compute("packing", g), slow


def shares_plot(rows: list[dict], d: Definition, path: Path) -> Path | None:
    """Where the slow links are, the packed trees and their shares: per swept slow fraction
    above 0 (the homogeneous case only when nothing else ran), the topology with its slow
    links drawn thick and dashed, every tree's links in its own colour, and a bar per tree
    with its share of the gradient and whether it crosses a slow link. Recomputed from each
    run's own topology file, so the picture is the trees that run used."""
    by_fraction: dict = {}
    for r in rows:
        if r["definition"] == d.name and r.get("spec") and r["spec"].get("tree") == "packing":
            by_fraction.setdefault(r["values"].get("slow_fraction", 0), r["spec"])
    if not by_fraction:
        return None
    shown = sorted(f for f in by_fraction if f) or sorted(by_fraction)
    fig = Figure(figsize=(10.0, 3.8 * len(shown)))
    colours = ["tab:blue", "tab:orange", "tab:green", "tab:purple", "tab:brown", "tab:pink", "tab:olive", "tab:cyan"]
    for row, fraction in enumerate(shown):
        g, ts, slow = _packed(by_fraction[fraction])
        pos = _tier_layout(g)
        ax = fig.add_subplot(len(shown), 2, 2 * row + 1)
        nx.draw_networkx_edges(g, pos, ax=ax, edge_color="lightgrey", width=1.0)
        nx.draw_networkx_edges(g, pos, ax=ax, edgelist=sorted(slow), edge_color="red", width=3.0, style="dashed")
        for i, t in enumerate(ts.trees):
            nx.draw_networkx_edges(g, pos, ax=ax, edgelist=sorted(t.edges), edge_color=colours[i % len(colours)],
                                   width=1.0 + 5.0 * t.weight, alpha=0.7)
        switches = [n for n in g if g.nodes[n].get("kind") == "switch"]
        nx.draw_networkx_nodes(g, pos, ax=ax, nodelist=switches, node_color="white", edgecolors="black",
                               node_size=260)
        nx.draw_networkx_nodes(g, pos, ax=ax, nodelist=[n for n in g if n not in switches], node_color="lightgrey",
                               node_shape="s", node_size=140)
        nx.draw_networkx_labels(g, pos, ax=ax, font_size=7)
        ax.set_title(f"slow_fraction={fraction}: {len(slow)} slow link(s) (red, dashed); "
                     f"trees by colour, width ~ share", fontsize=8)
        ax.axis("off")
        bx = fig.add_subplot(len(shown), 2, 2 * row + 2)
        labels = [f"tree {i + 1}\nroot {t.root}\n" + ("crosses slow" if any(
            tuple(sorted(e)) in {tuple(sorted(x)) for x in slow} for e in t.edges) else "avoids slow")
            for i, t in enumerate(ts.trees)]
        bx.bar(labels, [t.weight for t in ts.trees], color=[colours[i % len(colours)] for i in range(len(ts.trees))])
        bx.set_ylabel("share of the gradient")
        bx.set_ylim(0, 1)
        bx.tick_params(axis="x", labelsize=7)
        bx.set_title(f"{len(ts.trees)} packed tree(s), shares in proportion to their rates", fontsize=8)
    return _save(fig, path)


def write_plots(rows: list[dict], d: Definition, out_dir: Path) -> list[Path]:
    out = []
    if d.plot == "speedup":
        out.append(speedup_plot(rows, d, out_dir / f"{d.name}-speedup.png"))
    if d.plot == "scale":
        out.append(scale_plot(rows, d, out_dir / f"{d.name}-scale.png"))
    out.append(time_plot(rows, d, out_dir / f"{d.name}-time.png"))
    if d.plot == "shares":
        shares = shares_plot(rows, d, out_dir / f"{d.name}-shares.png")
        if shares:
            out.append(shares)
    occupancy = occupancy_plot(rows, d, out_dir / f"{d.name}-pool-occupancy.png")   # jobs that train
    if occupancy:
        out.append(occupancy)
    out += write_tree_drawings(rows, d, out_dir)
    return out
