"""The four sweep plots: completion time and goodput, against workers and against size.

Why these four: SwitchML's claim is that in-network allreduce time stays flat as
workers grow and scales with tensor size; goodput per worker shows the same
from the network's side.  Each plot draws the median per point (the line) and
every successful run (the dots), so the spread between repeats is visible and
a single outlier cannot hide behind a median.

Why `Figure` and the Agg canvas instead of pyplot: no global state and no
display needed, so plotting works on headless VMs and CI and inside tests.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from experiments.config import DTYPE_BYTES, Config

# (file, sweep, metric key in runs.csv, y-axis label, title start)
PLOTS = (
    ("completion_vs_workers.png", "workers", "seconds", "completion time (s)", "Allreduce completion time"),
    ("goodput_vs_workers.png", "workers", "goodput_mbps", "goodput per worker (Mb/s)", "Allreduce goodput"),
    ("completion_vs_size.png", "elements", "seconds", "completion time (s)", "Allreduce completion time"),
    ("goodput_vs_size.png", "elements", "goodput_mbps", "goodput per worker (Mb/s)", "Allreduce goodput"),
)


def human_count(n: int) -> str:
    """1048576 -> '1Mi', 16384 -> '16Ki': sizes in a sweep are usually powers of two."""
    for unit, scale in (("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10)):
        if n >= scale and n % scale == 0:
            return f"{n // scale}{unit}"
    return str(n)


def human_bytes(n: int) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{n} B"


def _subtitle(cfg: Config, sweep: str) -> str:
    if sweep == "workers":
        size = cfg.fixed_elements
        fixed = f"{size} {cfg.dtype} elements ({human_bytes(size * DTYPE_BYTES[cfg.dtype])})"
    else:
        fixed = f"{cfg.fixed_workers} workers"
    loss = f", loss {cfg.loss:g}" if cfg.loss else ""
    return f"{fixed}, backend {cfg.backend}{loss}, median of {cfg.repeats} run(s)"


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def draw(path: Path, cfg: Config, sweep: str, metric: str, ylabel: str, title: str,
         summary: list[dict[str, Any]], rows: list[dict[str, Any]]) -> Path:
    """One plot; a sweep with no successful run still gets a file that says so."""
    xkey = "workers" if sweep == "workers" else "elements"
    points = sorted((s for s in summary if sweep in s["sweeps"].split("+")), key=lambda s: s[xkey])
    ids = {s["point"] for s in points}
    fig = Figure(figsize=(7, 4.5), dpi=100)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    line = [(s[xkey], s[f"{metric}_median"]) for s in points if _is_number(s[f"{metric}_median"])]
    if line:
        ax.plot([x for x, _ in line], [y for _, y in line], "o-", color="tab:blue", label="median")
    for exact, style, label in ((True, dict(marker=".", color="tab:blue", alpha=0.45), "run (exact)"),
                                (False, dict(marker="x", color="tab:red"), "run (NOT exact)")):
        dots = [(r[xkey], r[metric]) for r in rows
                if r["point"] in ids and r["ok"] and r["exact"] is exact and _is_number(r.get(metric))]
        if dots:
            ax.scatter([x for x, _ in dots], [y for _, y in dots], label=label, zorder=3, **style)
    failed = sum(s["errors"] for s in points)
    lost = [s[xkey] for s in points if s["ok"] == 0]
    if lost:  # points with no successful run at all: mark where they would be
        ax.scatter(lost, [0] * len(lost), marker="v", color="tab:red", s=60, zorder=4,
                   clip_on=False, label="all runs failed")
    if not line:
        ax.text(0.5, 0.5, "no successful runs", ha="center", va="center", transform=ax.transAxes,
                fontsize=14, color="tab:red")
    xs = [s[xkey] for s in points]
    if sweep == "elements":
        ax.set_xscale("log", base=2)
        ax.set_xticks(xs, [f"{human_count(x)}\n{human_bytes(x * DTYPE_BYTES[cfg.dtype])}" for x in xs])
        ax.set_xlabel(f"tensor size per worker (elements of {cfg.dtype})")
    else:
        ax.set_xticks(xs)
        if xs:
            ax.set_xlim(min(xs) - 0.5, max(xs) + 0.5)
        ax.set_xlabel("workers")
    ax.set_ylabel(ylabel)
    ys = [y for _, y in line] + [r[metric] for r in rows if r["point"] in ids and r["ok"]
                                  and _is_number(r.get(metric))]
    ax.set_ylim(0, max(ys) * 1.12 if ys and max(ys) > 0 else 1)
    suffix = f" ({failed} failed run(s) not shown)" if failed else ""
    ax.set_title(f"{title} vs {'workers' if sweep == 'workers' else 'tensor size'}{suffix}\n"
                 f"{_subtitle(cfg, sweep)}", fontsize=10)
    ax.grid(True, alpha=0.3)
    if line or lost:
        ax.legend(fontsize=8, loc="best")
    fig.tight_layout()
    fig.savefig(path, format="png")
    return path


def write_plots(out_dir: Path, cfg: Config, summary: list[dict[str, Any]],
                rows: list[dict[str, Any]]) -> list[Path]:
    """All four plots into out_dir; returns their paths in PLOTS order."""
    return [draw(Path(out_dir) / name, cfg, sweep, metric, ylabel, title, summary, rows)
            for name, sweep, metric, ylabel, title in PLOTS]
