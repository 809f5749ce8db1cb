"""The report's "Where the paper's figure appears" section: a table row and a plot per claim
knob (experiments/where.py), with our measured ratio at the trend's own setting beside the
curve. Its own module so that the report (experiments/report.py) only places it."""

from __future__ import annotations

import re
from pathlib import Path

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from agglab.experiments.analysis import verdicts
from agglab.experiments.where import Curve, curves

NOTE = ("Each claim's bound (the wire model, as in the table above) swept over the knob its paper's "
        "setting differs in, the other settings as the trend has them. *Ours* is the measured ratio at the "
        "trend's own setting (the emulator is faithful there); the rest of each curve is the wire model's "
        "alone. *Where*: the first swept value at which the bound reaches the paper's figure.")


def _fmt(x: float) -> str:
    return "–" if x != x else f"{x:.3g}"


def plot(c: Curve, ours: float, path: Path) -> Path:
    """The bound against the knob, the paper's figure, and ours at today's value."""
    fig = Figure(figsize=(5.6, 3.6))
    ax = fig.add_subplot()
    numeric = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v, _, _ in c.points)
    xs = [v if numeric else i for i, (v, _, _) in enumerate(c.points)]
    ax.plot(xs, [b for _, b, _ in c.points], "o-", label="bound (wire model)")
    ax.plot(xs, [p for _, _, p in c.points], "--", color="grey", label="paper's figure")
    if ours == ours and c.today is not None and any(v == c.today for v, _, _ in c.points):
        at = next(x for x, (v, _, _) in zip(xs, c.points) if v == c.today)
        ax.plot([at], [ours], "*", color="black", markersize=12, label="ours (emulated)")
    if numeric and len(xs) > 2 and min(xs) > 0 and max(xs) / min(xs) >= 16:
        ax.set_xscale("log", base=2)
    if not numeric:
        ax.set_xticks(xs, [str(v) for v, _, _ in c.points])
    ax.set_xlabel(c.name)
    ax.set_ylabel("ratio")
    ax.set_title(f"{c.trend}: {c.claim}"[:70], fontsize=8)
    ax.legend(fontsize=7)
    FigureCanvasAgg(fig)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return path


def section(outcome, topo_dir: Path, out_dir: Path) -> list[str]:
    """The section's lines (none when no claim names a knob)."""
    rows: list[str] = []
    made: list[Path] = []
    for d in outcome.suite.definitions:
        found = curves(d, topo_dir)
        if not found:
            continue
        ours = {v.claim.text: v.ours for v in verdicts(outcome.rows, d)}
        for c in found:
            name = re.sub(r"[^a-z0-9]+", "-", f"where-{c.trend}-{c.knob}-{c.claim}".lower())[:80].strip("-")
            made.append(plot(c, ours.get(c.claim, float("nan")), out_dir / f"{name}.png"))
            bound_today = next((b for v, b, _ in c.points if v == c.today), float("nan"))
            today = f"{c.knob} = {c.today}" if c.today is not None else c.name
            rows.append(f"| {c.trend} | {c.claim} | {_fmt(c.paper)} | {today} | {_fmt(bound_today)} | "
                        f"{_fmt(ours.get(c.claim, float('nan')))} | {c.verdict()} | {made[-1].name} |")
    if not rows:
        return []
    return (["## Where the paper's figure appears", "", NOTE, "",
             "| trend | claim | paper | knob (today) | bound today | ours today | where | plot |",
             "|---|---|---|---|---|---|---|---|"] + rows + [""])
