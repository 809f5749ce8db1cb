"""What one worker and one switch cost, measured on one run of a given shape (from /proc).

Why: how many workers and switches one machine (or a cluster server) carries follows from
what each costs: resident memory, CPU to start, CPU per MB it moves. This builds the network
of the given shape, runs one allreduce on it and tears it down, and reports

- build and teardown wall time (with the network's and the controller's steps),
- per switch: PSS/RSS after start-up, CPU-seconds spent starting, CPU-seconds per MB it
  received during the allreduce (rx bytes of its ports, /sys/class/net),
- per worker (the ranks' own reports, hosts/worker.py): CPU-seconds to start (imports,
  input, socket), PSS/RSS, CPU-seconds per MB it sent and received,
- the machine: peak memory in use (MemTotal - MemAvailable), load average before and after.

PSS (proportional set size) is the figure to plan with: pages shared copy-on-write by
processes forked from one launcher count once in total, not once per process.

    sudo AGGLAB_NET_LOCK=/tmp/agglab-net.lock .venv/bin/python tools/scale_costs.py \\
        --topology fattree --k 8 --workers 128 --elements 32768 --bw 1 --json costs.json
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agglab.emulation.fidelity import _cpu_seconds  # noqa: E402
from agglab.ground import wire  # noqa: E402

MB = 1e6


def memory_kb(pid: int) -> tuple[int, int]:
    """(Pss, Rss) of a process in kB; (0, 0) once it is gone."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            kb = {line.split(":")[0]: int(line.split()[1]) for line in f if line[:4] in ("Pss:", "Rss:")}
        return kb.get("Pss", 0), kb.get("Rss", 0)
    except (OSError, ValueError, IndexError):
        return 0, 0


def machine_used_mb() -> float:
    with open("/proc/meminfo") as f:
        kb = {line.split(":")[0]: int(line.split()[1]) for line in f}
    return (kb["MemTotal"] - kb["MemAvailable"]) / 1024


def rx_bytes(intfs: list[str]) -> int:
    total = 0
    for intf in intfs:
        try:
            with open(f"/sys/class/net/{intf}/statistics/rx_bytes") as f:
                total += int(f.read())
        except (OSError, ValueError):
            pass
    return total


class PeakMemory(threading.Thread):
    """The machine's memory in use, sampled every `interval` s; `peak` is the largest."""

    def __init__(self, interval: float = 0.5):
        super().__init__(daemon=True)
        self.interval, self.peak, self.stopped = interval, machine_used_mb(), threading.Event()

    def run(self) -> None:
        while not self.stopped.wait(self.interval):
            self.peak = max(self.peak, machine_used_mb())


def stats(values: list[float]) -> dict:
    values = [v for v in values if v is not None]
    if not values:
        return {}
    return {"min": round(min(values), 4), "mean": round(sum(values) / len(values), 4), "max": round(max(values), 4)}


def measure(spec, lock: str | None) -> dict:
    from agglab.emulation.session import Session

    load_before = os.getloadavg()
    idle_mb = machine_used_mb()
    sampler = PeakMemory()
    sampler.start()
    lock_fd = None
    if lock:                                    # other networks on this machine: one at a time
        lock_fd = os.open(lock, os.O_CREAT | os.O_RDWR, 0o644)
        fcntl.flock(lock_fd, fcntl.LOCK_EX)
    try:
        session = Session(spec)
        t0 = time.monotonic()
        session.start()
        build_s = time.monotonic() - t0
        try:
            g = session.g
            switch_pids = {n.name: n.proc.pid for n in session.net.net.switches}
            start_cpu = {s: _cpu_seconds(p) for s, p in switch_pids.items()}
            mem = {s: memory_kb(p) for s, p in switch_pids.items()}
            launcher = session.net.launcher
            launcher_mem = memory_kb(launcher.pid) if launcher else (0, 0)
            built_mb = machine_used_mb()
            ports = {s: [e["intfs"][s] for _, _, e in g.edges(s, data=True)] for s in switch_pids}
            rx0 = {s: rx_bytes(p) for s, p in ports.items()}
            t1 = time.monotonic()
            result = session.allreduce()
            run_s = time.monotonic() - t1
            run_cpu = {s: (_cpu_seconds(p) or 0) - (start_cpu[s] or 0) for s, p in switch_pids.items()}
            rx = {s: rx_bytes(p) - rx0[s] for s, p in ports.items()}
            reports = [json.loads(f.read_text()) for f in sorted((session.net.run.path / f"run{session.runs}")
                                                                 .glob("rank*.json"))]
        finally:
            t2 = time.monotonic()
            session.stop()
            teardown_s = time.monotonic() - t2
    finally:
        if lock_fd is not None:
            os.close(lock_fd)
        sampler.stopped.set()
        sampler.join()
    moved = [(r.get("packets_sent", 0) + r.get("results_accepted", 0)) * wire.FRAME_BYTES / MB for r in reports]
    cpu = [r.get("cpu_user_s", 0) + r.get("cpu_sys_s", 0) for r in reports]
    switch_rx_mb = sum(rx.values()) / MB
    return {
        "shape": {"topology": spec.topology, "k": spec.k, "workers": spec.workers, "switches": len(switch_pids),
                  "tree": spec.tree, "elements": spec.elements, "bw_mbps": spec.bw, "window": spec.window},
        "exact": result.get("exact"), "link_bound": (result.get("fidelity") or {}).get("link_bound"),
        "fidelity_reason": (result.get("fidelity") or {}).get("reason"),
        "allreduce_s": result.get("seconds"), "allreduce_call_s": round(run_s, 2),
        "retransmissions": result.get("retransmissions"), "packets": result.get("packets"),
        "build_s": round(build_s, 2), "teardown_s": round(teardown_s, 2),
        "network_phases": dict(session.net.phases), "controller_phases": dict(session.phases),
        "switch": {"pss_mb": stats([m[0] / 1024 for m in mem.values()]),
                   "rss_mb": stats([m[1] / 1024 for m in mem.values()]),
                   "launcher_pss_mb": round(launcher_mem[0] / 1024, 1),
                   "start_cpu_s": stats(list(start_cpu.values())),
                   "run_cpu_s": stats(list(run_cpu.values())), "run_cpu_total_s": round(sum(run_cpu.values()), 2),
                   "rx_mb_total": round(switch_rx_mb, 3),
                   "cpu_s_per_mb": round(sum(run_cpu.values()) / switch_rx_mb, 3) if switch_rx_mb else None},
        "worker": {"start_cpu_s": stats([r.get("start_cpu_s") for r in reports]),
                   "pss_mb": stats([r.get("pss_mb") for r in reports]),
                   "rss_mb": stats([r.get("rss_mb") for r in reports]),
                   "run_cpu_s": stats(cpu), "gate_wait_s": stats([r.get("gate_wait_s") for r in reports]),
                   "moved_mb": stats(moved),
                   "cpu_s_per_mb": round(sum(cpu) / sum(moved), 3) if sum(moved) else None},
        "machine": {"cores": os.cpu_count(), "used_mb_before": round(idle_mb), "used_mb_built": round(built_mb),
                    "used_mb_peak": round(sampler.peak), "load_before": [round(x, 2) for x in load_before],
                    "load_after": [round(x, 2) for x in os.getloadavg()]},
        "errors": result.get("errors", [])[:3],
    }


def main(argv: list[str] | None = None) -> int:
    from agglab.ground.runspec import RunSpec

    ap = argparse.ArgumentParser(description="measure one worker's and one switch's cost (memory, CPU to "
                                 "start, CPU per MB) on one run of the given shape")
    ap.add_argument("--topology", default="fattree", help="single, leafspine, fattree, bcube (default fattree)")
    ap.add_argument("--k", type=int, default=8, help="fat-tree arity (default 8)")
    ap.add_argument("--workers", type=int, default=128, help="workers (default 128)")
    ap.add_argument("--tree", default="rat", help="aggregation tree (default rat)")
    ap.add_argument("--elements", type=int, default=32768, help="int32 per worker (default 32768)")
    ap.add_argument("--bw", type=float, default=1.0, help="link rate, Mb/s (default 1)")
    ap.add_argument("--window", type=int, default=None, help="slots per worker (default: the agents')")
    ap.add_argument("--json", help="also write the figures to this file")
    ap.add_argument("--lock", default=os.environ.get("AGGLAB_NET_LOCK"),
                    help="flock this file while the network exists (default $AGGLAB_NET_LOCK)")
    a = ap.parse_args(argv)
    spec = RunSpec(topology=a.topology, k=a.k, workers=a.workers, tree=a.tree, elements=a.elements, bw=a.bw,
                   window=a.window)
    figures = measure(spec, a.lock)
    text = json.dumps(figures, indent=1)
    print(text)
    if a.json:
        Path(a.json).write_text(text + "\n")
    return 0 if figures["exact"] else 1


if __name__ == "__main__":
    sys.exit(main())
