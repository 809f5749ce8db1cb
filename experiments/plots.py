"""One figure per trend, in the paper's comparison, with flagged runs marked as such.

Why every plot marks CPU-bound points: a time measured while the emulator, not the link,
was the bottleneck says nothing about the network (emulation/fidelity.py); such a point is
drawn as a red cross and the legend says "CPU-bound (flagged)". Times are in the real
network's units (the axis label says so). `Figure` + Agg: no display, no global state.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from experiments.analysis import select
from experiments.definition import Definition
from experiments.units import format_rate, parse_rate


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
    if any_flagged:
        ax.plot([], [], "x", color="red", markersize=10, label="CPU-bound (flagged)")
    ax.legend(fontsize=7)


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


def shares_plot(rows: list[dict], d: Definition, path: Path) -> Path | None:
    """Rate share of each packed tree, recomputed from the run's own topology."""
    from controller import topologies, trees
    from ground.runspec import RunSpec

    specs = [r["spec"] for r in rows if r["definition"] == d.name and r.get("spec")
             and r["spec"].get("tree") == "packing"]
    if not specs:
        return None
    spec = RunSpec.from_dict(specs[0])
    g = topologies.for_run(spec)
    ts = trees.compute("packing", g)
    weights = list(ts.weights)
    fig = Figure(figsize=(5.4, 3.6))
    ax = fig.add_subplot()
    ax.bar([f"tree {i + 1}\nroot {t.root}" for i, t in enumerate(ts.trees)], weights)
    ax.set_ylabel("share of the gradient (rate share)")
    slow = sum(1 for _, _, e in g.edges(data=True) if e.get("bw") and e["bw"] < max(
        x.get("bw") or 0 for _, _, x in g.edges(data=True)))
    ax.set_title(f"Packed trees on {Path(spec.topology).stem}\n({slow} slow links)", fontsize=9)
    return _save(fig, path)


def write_plots(rows: list[dict], d: Definition, out_dir: Path) -> list[Path]:
    out = []
    if d.plot == "speedup":
        out.append(speedup_plot(rows, d, out_dir / f"{d.name}-speedup.png"))
    out.append(time_plot(rows, d, out_dir / f"{d.name}-time.png"))
    if d.plot == "shares":
        shares = shares_plot(rows, d, out_dir / f"{d.name}-shares.png")
        if shares:
            out.append(shares)
    from experiments.tree_drawings import write_tree_drawings     # the trees the numbers are about
    out += write_tree_drawings(rows, d, out_dir)
    return out
