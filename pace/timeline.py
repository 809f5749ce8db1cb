"""The iteration as a picture (PNG) and as a Chrome trace-event JSON.

Why the trace format: Horovod's timeline and PyTorch's profiler write it, and Perfetto
and chrome://tracing open it, so users look at agglab's schedule with the tools they
know. One process per worker (pid), one thread for compute and one for communication
(tid), complete events ("ph": "X") in microseconds.
"""

from __future__ import annotations

import json
from pathlib import Path

from agglab.pace.schedule import Iteration

COMPUTE_TID, COMM_TID = 1, 2


def trace_events(runs: dict[str, list[Iteration]]) -> dict:
    """{"traceEvents": [...]}: runs maps a scheduler to one Iteration per worker."""
    events, pid = [], 0
    for scheduler, per_worker in runs.items():
        for rank, it in enumerate(per_worker):
            pid += 1
            events.append({"name": "process_name", "ph": "M", "pid": pid, "tid": 0,
                           "args": {"name": f"{scheduler} worker {rank} ({it.iteration_ms:.2f} ms/iteration)"}})
            for tid, name in ((COMPUTE_TID, "compute"), (COMM_TID, "allreduce")):
                events.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": tid, "args": {"name": name}})
            for name, start, end in it.compute:
                events.append({"name": name, "cat": "compute", "ph": "X", "ts": start * 1e3,
                               "dur": (end - start) * 1e3, "pid": pid, "tid": COMPUTE_TID})
            for tr in it.transfers:
                events.append({"name": tr.label, "cat": "allreduce", "ph": "X", "ts": tr.start * 1e3,
                               "dur": (tr.end - tr.start) * 1e3, "pid": pid, "tid": COMM_TID,
                               "args": {"bytes": tr.nbytes, "priority": tr.priority, "ready_ms": tr.ready}})
    return {"traceEvents": events, "displayTimeUnit": "ms"}


def write_trace(runs: dict[str, list[Iteration]], path: Path) -> Path:
    Path(path).write_text(json.dumps(trace_events(runs)))
    return Path(path)


def plot(runs: dict[str, list[Iteration]], path: Path, title: str) -> Path:
    """One row pair (compute, allreduce) per scheduler and worker; transfers coloured by the
    layer the next forward needs first (dark = early)."""
    import matplotlib  # lazy: matplotlib, only plot() needs it
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # lazy: matplotlib, only plot() needs it

    rows = [(s, r, it) for s, its in runs.items() for r, it in enumerate(its)]
    fig, ax = plt.subplots(figsize=(12, 1.0 + 0.8 * len(rows)))
    cmap = plt.get_cmap("viridis")
    labels, y = [], 0
    for scheduler, rank, it in rows:
        layers = max((max(t.layers) for t in it.transfers), default=0) + 1
        bars = [(s, e - s) for n, s, e in it.compute]
        colors = ["#d62728" if n.startswith("bwd") else "#1f77b4" for n, _, _ in it.compute]
        ax.broken_barh(bars, (y + 0.1, 0.35), facecolors=colors)
        ax.broken_barh([(t.start, t.end - t.start) for t in it.transfers], (y + 0.55, 0.35),
                       facecolors=[cmap(t.priority / layers) for t in it.transfers], edgecolor="white",
                       linewidth=0.3)
        labels.append((y + 0.5, f"{scheduler} w{rank}\n{it.iteration_ms:.1f} ms"))
        y += 1
    ax.set_yticks([p for p, _ in labels], [t for _, t in labels])
    # the y axis is inverted below, so each row's compute bar (y + 0.1) is drawn above its
    # allreduce bar (y + 0.55)
    ax.set_xlabel("time (ms, real-network units) - upper bar: forward (blue) / backward (red); "
                  "lower bar: allreduce (dark = needed early)")
    ax.set_title(title, fontsize=10)
    ax.invert_yaxis()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return Path(path)
