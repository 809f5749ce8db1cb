"""`agglab calibrate`: this machine's fidelity ceiling, the fastest faithful link rate.

Why: the emulator is faithful only while the links, not Python, are the bottleneck
(measured on a 2-core machine before hosts were paced: 8 workers x 1M int32 at 94% of the wire-time ideal at 5 Mb/s, 61% at
10 Mb/s, 14% at 40 Mb/s). The ceiling is the highest per-link rate at which an N-worker
dense allreduce on one switch finishes within `tolerance` of its analytic wire time
(agglab.emulation.fidelity.dense_link_seconds) with its bottleneck link at least 90% busy.
The experiments scale every real network so that its fastest link runs at the ceiling.

Window: 16 slots per worker by default, the value the trend definitions use. With the
agent's default (128) a few-Mb/s link queues a whole window (160 ms at 2 Mb/s), the
workers' timers fire and duplicates fill the link: measured here, 8 workers at 2 Mb/s ran at
76% of the ideal with 3458 retransmissions at window 128 and at 92% with 96 at window 16.

Search: rates step up by `factor` from `start` while runs stay faithful, or down from it
(at most `--down` steps) while they do not; then a bisection between the faithful and the
unfaithful rate next to it (`--refine` steps). Each rate runs a gradient sized for
`seconds` of wire time, so every probe costs about the same.
The result goes to agglab.emulation.fidelity.calibration_path() (results/calibration.json in the
checkout, or $AGGLAB_CALIBRATION).

Backend: `--backend bmv2` calibrates BMv2's simple_switch, stored apart from the software
twin's (agglab.emulation.fidelity.load_calibration): BMv2 spends much more CPU per frame, so its
ceiling is its own (at the twin's 5 Mb/s a BMv2 switch used 111% of a core with 2 workers).

Shape: by default 8 workers on one switch, the record the experiments scale every trend by
(more than 8 workers on one switch are stored as a shape, `single-w16`).
`--topology fattree --k 8 --workers 128 --tree rat` calibrates that run's own shape instead
(stored under `shapes` in the same file, agglab.emulation.fidelity.ceiling_for): the CPU a shape
needs per link-second grows with its workers and switches (every worker's agent, and about
1.6 frames through switches per worker frame on a k=8 fat-tree), so a large shape is
faithful only at lower rates. The analytic time is the same: in a tree every link carries
one frame per block each way, as a worker's own link does.
`--scheme sparse --density D` probes OmniReduce's block-sparse pipeline (its own shape,
`single-w8-sparse`): a sparse frame carries a block index and walks the bitmap, so a BMv2
switch spends more per frame than on the dense one; the analytic time is then
agglab.emulation.wire_model's for those blocks.
`--scheme ring` / `--scheme ps` probes a host baseline on the shape (stored as its own,
e.g. fattree-k8-w128-ring), against its own wire time (wire_model.ring_seconds /
ps_seconds): its CPU is 128 agents' TCP stacks and copies, not the switches', so the
in-network schemes' ceiling at 128 workers left the machine saturated and ring and PS
CPU-bound (docs/measurements.md, 2026-12-06). agglab.experiments.runner.trend_ceiling runs a
trend of host baselines at the lowest of its schemes' own ceilings.
"""

from __future__ import annotations

import math
import os
import platform
import sys
import time

from agglab.emulation.fidelity import dense_link_seconds, save_calibration, save_shape_calibration, shape_key
from agglab.ground import wire
from agglab.ground.runspec import DEFAULT_WINDOW, RunSpec
from agglab.ground.schemes import HOST_BASELINES
from agglab.ground.timerslack import set_timer_slack, wakeup_latency


def elements_for(rate_mbps: float, seconds: float) -> int:
    """A gradient whose in-network wire time at rate_mbps is about `seconds`."""
    frames = rate_mbps * 1e6 * seconds / (wire.FRAME_BYTES * 8)
    return max(wire.K, int(frames) * wire.K)


DEFAULT_SHAPE = {"topology": "single"}


# A sparse probe's gradient grows by 1/density so it stays about `seconds` on the wire, at most
# this many elements (64 MiB of int32 per worker: 8 workers' inputs and sums fit in memory)
SPARSE_MAX_ELEMENTS = 1 << 24
# A host baseline's probe waits this long without progress before giving up: a PS shard
# completes only when all pushes have crossed the network (experiments/trends/scale_baselines.yaml)
HOST_GIVE_UP = 600.0


def probe(rate: float, workers: int, seconds: float, tolerance: float, log, window: int | None = None,
          shape: dict | None = None, backend: str = "soft") -> dict:
    """One allreduce at `rate` on `shape` (RunSpec fields: topology, k, tree; default one
    switch; `scheme: sparse` with a `density` runs OmniReduce's block-sparse pipeline instead
    of the dense one): its time against the analytic wire time, and its fidelity."""
    from agglab.emulation.session import run_allreduce  # lazy: loads numpy, networkx, PyYAML, pyroute2, only probe() needs it

    run = {k: v for k, v in (shape or DEFAULT_SHAPE).items() if k not in ("scheme", "density")}
    elements = elements_for(rate, seconds)
    ideal = dense_link_seconds(elements, rate, window or DEFAULT_WINDOW)
    if (shape or {}).get("scheme") in HOST_BASELINES:
        from agglab.emulation.wire_model import wire_seconds  # lazy: loads numpy, networkx, PyYAML, only probe() needs it

        run.update(algorithm=shape["scheme"], give_up=HOST_GIVE_UP)
        ideal = wire_seconds(RunSpec(workers=workers, elements=elements, bw=rate, window=window, **run))
        elements = max(wire.K, int(elements * seconds / ideal) // wire.K * wire.K)   # about `seconds` on the wire
        ideal = wire_seconds(RunSpec(workers=workers, elements=elements, bw=rate, window=window, **run))
    elif (shape or {}).get("scheme") == "sparse":
        from agglab.emulation.wire_model import wire_seconds  # lazy: loads numpy, networkx, PyYAML, only probe() needs it

        density = float(shape.get("density") or 0.1)
        elements = min(SPARSE_MAX_ELEMENTS, int(elements / density) // wire.K * wire.K)
        run.update(algorithm="omnireduce", density=density)
        ideal = wire_seconds(RunSpec(workers=workers, elements=elements, bw=rate, window=window, **run))
        if ideal > seconds * 1.5:          # the union of random blocks is larger: about `seconds` again
            elements = max(wire.K, int(elements * seconds / ideal) // wire.K * wire.K)
            ideal = wire_seconds(RunSpec(workers=workers, elements=elements, bw=rate, window=window, **run))
    result = run_allreduce(workers=workers, elements=elements, bw=rate, window=window, backend=backend, **run)
    took = result.get("seconds") or float("inf")
    fid = result.get("fidelity") or {}
    faithful = bool(result.get("ok")) and took <= ideal * (1 + tolerance) and bool(fid.get("link_bound"))
    print(f"  {rate:g} Mb/s: {elements} int32 x {workers} workers in {took:.2f} s, analytic {ideal:.2f} s "
          f"({ideal / took:.0%} of ideal), {result.get('retransmissions')} retransmissions; "
          f"{fid.get('reason', 'no fidelity record')} -> "
          f"{'faithful' if faithful else 'NOT faithful'}"
          + ("" if result.get("ok") else f"; {(result.get('errors') or ['not ok'])[0].splitlines()[0][:200]}"),
          file=log, flush=True)
    return {"rate_mbps": rate, "elements": elements, "seconds": took, "analytic_seconds": round(ideal, 4),
            "faithful": faithful, "fidelity": fid, "ok": bool(result.get("ok"))}


def search(try_rate, start: float, factor: float, limit: float, refine: int, down: int = 4,
           over: int = 2):
    """(good, bad, probes): the highest faithful rate found and the lowest unfaithful one above
    it (None when there is none). `try_rate(rate)` runs one probe and returns its record.
    Up by `factor` from `start` while faithful. If `start` is not: first down (at most `down`
    steps; a large shape's ceiling lies far below one switch's), and if nothing down there is
    faithful, up again past `start` (at most `over` steps: very slow links can lose to the
    workers' retransmission timers, a full window queued at the link). Then `refine`
    bisections between the faithful rate and the unfaithful one above it."""
    probes, good, bad = [], None, None

    def climb(rate: float, steps: int | None) -> None:
        nonlocal good, bad
        while rate <= limit and (steps is None or steps > 0):
            p = try_rate(rate)
            probes.append(p)
            if not p["faithful"]:
                bad = rate
                if good is not None:
                    return
            else:
                good, bad = rate, None
                steps = None               # faithful once: climb on until the first unfaithful rate
            if steps is not None:
                steps -= 1
            rate *= factor

    climb(start, 1)
    if good is None:                       # the start was too fast for this shape: go down
        rate = start
        for _ in range(down):
            above, rate = rate, round(rate / factor, 4)
            p = try_rate(rate)
            probes.append(p)
            if p["faithful"]:
                good, bad = rate, above
                break
    if good is None:                       # nothing below either: slow links lost to the timers?
        climb(start * factor, over)
    for _ in range(refine if good is not None and bad is not None else 0):
        mid = round((good + bad) / 2, 4)
        p = try_rate(mid)
        probes.append(p)
        good, bad = (mid, bad) if p["faithful"] else (good, mid)
    return good, bad, probes


def calibrate(workers: int = 8, start: float = 2.0, factor: float = 2.0, limit: float = 200.0,
              refine: int = 2, seconds: float = 3.0, tolerance: float = 0.10, window: int | None = 16,
              log=sys.stderr, shape: dict | None = None, down: int = 4, backend: str = "soft") -> dict:
    """Step up (or down), then bisect; returns (and stores) the calibration record of
    `backend`. `shape` (topology, k, tree) other than one switch is stored as that shape's
    ceiling."""
    good, bad, probes = search(lambda rate: probe(rate, workers, seconds, tolerance, log, window, shape, backend),
                               start, factor, limit, refine, down)
    shape = {**DEFAULT_SHAPE, **(shape or {})}

    set_timer_slack()                  # as the emulator's processes run (ground/timerslack.py)
    record = {"ceiling_mbps": good, "backend": backend, "workers": workers, "window": window, "tolerance": tolerance,
              "shape": {**shape, "workers": workers},
              # how late this machine wakes a pacer-sized wait: what a pacer's margin must absorb,
              # so two machines' ceilings can be compared with what their kernels did
              "wakeup_latency": wakeup_latency(),
              "when": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "host": platform.node(),
              "cores": os.cpu_count(), "load_average": list(os.getloadavg()), "probes": probes,
              "note": ("no rate was faithful: the ceiling is unknown, experiments fall back to the default"
                       if good is None else f"first unfaithful rate: {bad} Mb/s" if bad else
                       f"faithful up to the search limit {limit} Mb/s")}
    default = shape == DEFAULT_SHAPE and workers <= 8    # more workers on one switch: a shape of its own
    key = shape_key(shape["topology"], workers, shape.get("k"), shape.get("tree"), shape.get("scheme"))
    if good is not None:
        path = save_calibration(record, backend) if default else save_shape_calibration(key, record, backend)
        where = f"{workers} workers on one switch" if default else key
        print(f"fidelity ceiling ({backend}): {good:g} Mb/s per link ({where}) -> {path}", file=log)
    elif default:                            # the record every trend scales by: never store an empty one
        print("no rate was faithful (is the machine overloaded?); nothing stored", file=log)
    else:                                    # remembered, so a suite does not search it again
        path = save_shape_calibration(key, record, backend)
        print(f"no rate was faithful for {key} (is the machine overloaded?); the search is stored in {path}, "
              "so suites run its trends at their ceiling without searching again", file=log)
    return record


def _refusal(args) -> str | None:
    """Why these options cannot calibrate (one line), or None."""
    finite = all(math.isfinite(v) for v in (args.start, args.factor, args.limit, args.seconds, args.tolerance))
    if not finite or args.workers < 2 or args.start <= 0 or args.factor <= 1 or args.limit < args.start:
        return "need --workers >= 2, --start > 0, --factor > 1, --limit >= --start (finite numbers)"
    if args.seconds <= 0 or args.tolerance < 0:
        return f"need --seconds > 0 and --tolerance >= 0, got {args.seconds:g} and {args.tolerance:g}"
    if args.refine < 0 or args.down < 0:
        return f"need --refine >= 0 and --down >= 0, got {args.refine} and {args.down}"
    return None


def main(args) -> int:
    refusal = _refusal(args)
    if refusal:
        print(f"agglab calibrate: {refusal}", file=sys.stderr)
        return 2
    shape = {"topology": args.topology, **({"k": args.k} if args.k is not None else {}),
             **({"tree": args.tree} if args.tree else {})}
    run_shape = dict(shape)
    if args.scheme == "sparse":
        if not 0 < args.density < 1:
            print("agglab calibrate: --scheme sparse needs --density within (0, 1)", file=sys.stderr)
            return 2
        shape.update(scheme="sparse", density=args.density)
    elif args.scheme in HOST_BASELINES:
        shape.update(scheme=args.scheme)
    try:                                     # bad shapes: one line before any network is built
        from agglab.emulation.session import graph_for  # lazy: loads numpy, networkx, PyYAML, pyroute2, only main() needs it

        graph_for(RunSpec(workers=args.workers, bw=args.start, window=args.window or None, **run_shape))
    except ValueError as exc:
        print(f"agglab calibrate: {str(exc).splitlines()[0]}", file=sys.stderr)
        return 2
    if os.geteuid() != 0:
        print("agglab calibrate needs root (Mininet): run it with sudo", file=sys.stderr)
        return 2
    from agglab.ground import netlease  # lazy: only a calibration that runs takes the machine

    try:                                     # its probes need the CPU alone (ground/netlease.py)
        netlease.acquire("agglab calibrate", alone=True)
    except netlease.NetworkBusy as exc:
        print(f"agglab calibrate: {exc}", file=sys.stderr)
        return exc.exit_code
    where = ("on one switch" if args.topology == "single" else
             f"on {shape_key(args.topology, args.workers, args.k, args.tree, shape.get('scheme'))}")
    where += f", sparse pipeline at density {args.density:g}" if args.scheme == "sparse" else ""
    where += f", {args.scheme} on the hosts" if args.scheme in HOST_BASELINES else ""
    print(f"calibrating {args.backend}: {args.workers} workers {where}, rates from {args.start:g} Mb/s x{args.factor:g} "
          f"(at most {args.limit:g}, or down at most {args.down} steps), faithful = within {args.tolerance:.0%} "
          "of the analytic wire time and bottleneck >= 90% busy", file=sys.stderr)
    try:
        record = calibrate(args.workers, args.start, args.factor, args.limit, args.refine, args.seconds,
                           args.tolerance, args.window or None, shape=shape, down=args.down, backend=args.backend)
    finally:
        netlease.release()
    return 0 if record["ceiling_mbps"] else 1


def add_parser(sub) -> None:
    c = sub.add_parser("calibrate", help="measure this machine's fidelity ceiling (fastest faithful link rate) "
                       "and store it for the experiments")
    c.add_argument("--workers", type=int, default=8, help="workers (default 8)")
    c.add_argument("--backend", choices=["soft", "bmv2"], default="soft", help="data plane to calibrate (default "
                   "soft); each backend's ceiling is stored apart and experiments on it use its own")
    c.add_argument("--topology", default="single", help="the shape to calibrate: single (default: 8 workers on one "
                   "switch, the record experiments scale by), leafspine, fattree, bcube; other shapes are stored "
                   "as that shape's own ceiling")
    c.add_argument("--k", type=int, default=None, help="fat-tree / BCube parameter of --topology")
    c.add_argument("--tree", default=None, help="aggregation tree of the runs (default spt)")
    c.add_argument("--scheme", choices=["dense", "sparse", *HOST_BASELINES], default="dense", help="what the probes "
                   "run: dense (SwitchML, default), sparse (OmniReduce's block-sparse one, which costs a BMv2 switch "
                   "more per frame; stored as its own shape, e.g. single-w8-sparse), or a host baseline, ring or ps "
                   "(the hosts sum over TCP: their own CPU, their own ceiling, e.g. fattree-k8-w128-ring)")
    c.add_argument("--density", type=float, default=0.1, help="fraction of non-zero blocks of a sparse probe "
                   "(default 0.1)")
    c.add_argument("--down", type=int, default=4, help="steps down from --start when it is not faithful (default 4)")
    c.add_argument("--start", type=float, default=2.0, help="first rate in Mb/s (default 2)")
    c.add_argument("--factor", type=float, default=2.0, help="step-up factor (default 2)")
    c.add_argument("--limit", type=float, default=200.0, help="highest rate tried, Mb/s (default 200)")
    c.add_argument("--refine", type=int, default=2, help="bisection steps after the step-up (default 2)")
    c.add_argument("--seconds", type=float, default=3.0, help="wire time of each probe (default 3 s)")
    c.add_argument("--window", type=int, default=16, help="outstanding slots per worker, 0 the agents' default "
                   "(default 16, as the "
                   "trend definitions use: a full default window queued at a few-Mb/s link outlasts the "
                   "workers' retransmission timers, and the duplicates, not the data, fill the link)")
    c.add_argument("--tolerance", type=float, default=0.10, help="allowed excess over the analytic time (default 0.10)")
    c.set_defaults(func=main)
