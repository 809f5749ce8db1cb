"""Jobs that train, in a trend's report: each job's iterations/s (a table) and the pool's
occupancy over time (a plot), from the rows' `jobs` and `pool_occupancy` (emulation/session.py).

Why per job: ATP's claim is about throughput per job in a shared cluster; the trend's
`seconds` is the slowest job's, which hides a job starved by the others. Why occupancy:
the shared pool's gain rests on aggregators a computing job leaves idle; the switches'
registers, sampled during the run, show whether the pool was full, idle, or shared.
"""

from __future__ import annotations

import statistics
from pathlib import Path

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure


def _trained(rows: list[dict], d) -> list[dict]:
    return [r for r in rows if r["definition"] == d.name and r.get("ok")
            and any(j.get("iterations_per_s") for j in r.get("jobs") or [])]


def jobs_table(rows: list[dict], d) -> list[str]:
    """Per series, point and job: the median iterations/s over repeats (emulated time), the
    job's start offset and its compute per iteration; [] when no run trained."""
    trained = _trained(rows, d)
    if not trained:
        return []
    groups: dict[tuple, list[float]] = {}
    info: dict[tuple, dict] = {}
    for r in trained:
        point = " ".join(f"{k}={v}" for k, v in sorted(r["values"].items()) if k in d.sweep)
        for i, j in enumerate(r["jobs"]):
            key = (r["series"], point, i)
            groups.setdefault(key, []).append(j["iterations_per_s"])
            info[key] = j
    lines = ["Per job (jobs that train): iterations/s in emulated time, median over repeats (min–max); "
             "each job's start offset and compute per iteration (emulated ms).", "",
             "| series | point | job | iterations | iterations/s | offset s | compute ms | window |",
             "|---|---|---:|---:|---:|---:|---:|---:|"]
    for (series, point, i), vals in sorted(groups.items()):
        j = info[(series, point, i)]
        lines.append(f"| {series} | {point} | {i} | {j.get('iterations')} | {statistics.median(vals):.3f} "
                     f"({min(vals):.3f}–{max(vals):.3f}) | {j.get('offset_s')} | {j.get('compute_ms')} | "
                     f"{j.get('window')} |")
    return lines + [""]


def occupancy_plot(rows: list[dict], d, path: Path) -> Path | None:
    """One panel per point (x value) with an occupancy record: per series, the busiest
    switch's held aggregators as a fraction of the pool against time (first repeat)."""
    recs = [r for r in rows if r["definition"] == d.name and r.get("ok") and r.get("pool_occupancy")
            and r["pool_occupancy"].get("t")]
    if not recs:
        return None
    xs = sorted({r["values"].get(d.x) for r in recs}, key=str)
    fig = Figure(figsize=(6.4, 2.6 * len(xs)))
    for n, x in enumerate(xs, start=1):
        ax = fig.add_subplot(len(xs), 1, n)
        seen = set()
        for r in sorted(recs, key=lambda r: (r["series"], r["repeat"])):
            if r["values"].get(d.x) != x or r["series"] in seen:
                continue
            seen.add(r["series"])
            occ = r["pool_occupancy"]
            busiest = [max((h[i] or 0) for h in occ["held"].values()) if occ["held"] else 0
                       for i in range(len(occ["t"]))]
            ax.step(occ["t"], [b / occ["pool"] for b in busiest], where="post",
                    label=f"{r['series']} (pool {occ['pool']}, {occ['register']})")
        ax.set_ylim(0, 1.05)
        ax.set_ylabel("held / pool\n(busiest switch)", fontsize=8)
        ax.set_title(f"{d.name}: {d.x}={x}", fontsize=9)
        ax.legend(fontsize=7)
    ax.set_xlabel("time since the workers' launch (emulated s; the first seconds: processes starting)")
    FigureCanvasAgg(fig)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return path
