"""`agglab calibrate`: this machine's fidelity ceiling, the fastest faithful link rate.

Why: the emulator is faithful only while the links, not Python, are the bottleneck
(measured on a 2-core machine before hosts were paced: 8 workers x 1M int32 at 94% of the wire-time ideal at 5 Mb/s, 61% at
10 Mb/s, 14% at 40 Mb/s). The ceiling is the highest per-link rate at which an N-worker
dense allreduce on one switch finishes within `tolerance` of its analytic wire time
(emulation.fidelity.switchml_wire_seconds) with its bottleneck link at least 90% busy.
The experiments scale every real network so that its fastest link runs at the ceiling.

Window: 16 slots per worker by default, the value the trend definitions use. With the
agent's default (128) a few-Mb/s link queues a whole window (160 ms at 2 Mb/s), the
workers' timers fire and duplicates fill the link: measured here, 8 workers at 2 Mb/s ran at
76% of the ideal with 3458 retransmissions at window 128 and at 92% with 96 at window 16.

Search: rates are rungs of one ladder, `start` x 2^(k/4) (so two calibrations, on one machine
or two, differ by whole steps of 19%); they step up by `factor` while runs stay faithful, then
a bisection on the ladder between the last faithful and the first unfaithful rung (`--refine`
steps; two resolve a doubling to one step). A rung is faithful when the majority of
`--repeats` probes is (one run is at the mercy of whatever else ran in its 3 s). Each rate
runs a gradient sized for `seconds` of wire time, so every probe costs about the same. The
record keeps the machine's wake-up latency (ground/timerslack.py), what a pacer's margin must
absorb, beside the ceiling.
The result goes to emulation.fidelity.calibration_path() (results/calibration.json in the
checkout, or $AGGLAB_CALIBRATION).
"""

from __future__ import annotations

import math
import os
import platform
import sys
import time

from emulation.fidelity import save_calibration, switchml_wire_seconds
from ground import wire


def elements_for(rate_mbps: float, seconds: float) -> int:
    """A gradient whose in-network wire time at rate_mbps is about `seconds`."""
    frames = rate_mbps * 1e6 * seconds / (wire.FRAME_BYTES * 8)
    return max(wire.K, int(frames) * wire.K)


def probe(rate: float, workers: int, seconds: float, tolerance: float, log, window: int | None = None) -> dict:
    """One allreduce at `rate`: its time against the analytic wire time, and its fidelity."""
    from emulation.session import run_allreduce

    elements = elements_for(rate, seconds)
    ideal = switchml_wire_seconds(elements, rate)
    result = run_allreduce(workers=workers, elements=elements, bw=rate, window=window)
    took = result.get("seconds") or float("inf")
    fid = result.get("fidelity") or {}
    faithful = bool(result.get("ok")) and took <= ideal * (1 + tolerance) and bool(fid.get("link_bound"))
    print(f"  {rate:g} Mb/s: {elements} int32 x {workers} workers in {took:.2f} s, analytic {ideal:.2f} s "
          f"({ideal / took:.0%} of ideal), {result.get('retransmissions')} retransmissions; "
          f"{fid.get('reason', 'no fidelity record')} -> "
          f"{'faithful' if faithful else 'NOT faithful'}", file=log, flush=True)
    return {"rate_mbps": rate, "elements": elements, "seconds": took, "analytic_seconds": round(ideal, 4),
            "faithful": faithful, "fidelity": fid, "ok": bool(result.get("ok"))}


STEPS_PER_DOUBLING = 4      # the ladder: start x 2^(k/4), so a ceiling is known to one step (19%)


def ladder(start: float, k: int) -> float:
    """The k-th rate of the ladder (3 significant digits, the same in every run)."""
    return float(f"{start * 2 ** (k / STEPS_PER_DOUBLING):.3g}")


def verdict(rate: float, repeats: int, run) -> tuple[bool, list[dict]]:
    """Probe `rate` until a majority of `repeats` probes agrees: (faithful, probes). Why a
    majority: one run is at the mercy of whatever else the machine did in its 3 s; the
    majority of three is what this machine usually does at that rate."""
    probes, need = [], repeats // 2 + 1
    while True:
        probes.append(run(rate))
        yes = sum(p["faithful"] for p in probes)
        if yes >= need or len(probes) - yes >= need:
            return yes >= need, probes


def calibrate(workers: int = 8, start: float = 2.0, factor: float = 2.0, limit: float = 200.0,
              refine: int = 2, seconds: float = 3.0, tolerance: float = 0.10, window: int | None = 16,
              log=sys.stderr, repeats: int = 3, probe_fn=None) -> dict:
    """Step up the ladder by `factor`, then bisect on it; returns (and stores) the record.
    Rates are ladder rungs (`ladder`), so two calibrations differ by whole steps, and each
    rung's verdict is the majority of `repeats` probes (`verdict`)."""
    run = probe_fn or (lambda rate: probe(rate, workers, seconds, tolerance, log, window))
    stride = max(1, round(STEPS_PER_DOUBLING * math.log2(factor)))
    probes, good, bad = [], None, None
    k, tried = 0, 0
    while ladder(start, k) <= limit:
        ok, ps = verdict(ladder(start, k), repeats, run)
        probes += ps
        tried += 1
        if ok:
            good, bad = k, None
        else:
            bad = k
            if good is not None:
                break
            # unfaithful below any faithful rate: very slow links can lose to the workers'
            # retransmission timers (a full window queued at the link); keep climbing a little
            if tried >= 3:
                break
        k += stride
    for _ in range(refine if good is not None and bad is not None else 0):
        if bad - good <= 1:
            break
        mid = (good + bad) // 2
        ok, ps = verdict(ladder(start, mid), repeats, run)
        probes += ps
        good, bad = (mid, bad) if ok else (good, mid)
    ceiling = ladder(start, good) if good is not None else None
    from ground.timerslack import set_timer_slack, wakeup_latency

    set_timer_slack()                  # as the emulator's processes run (ground/timerslack.py)
    record = {"ceiling_mbps": ceiling, "workers": workers, "window": window, "tolerance": tolerance,
              "repeats": repeats, "step": f"x2^(1/{STEPS_PER_DOUBLING})",
              "when": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "host": platform.node(),
              "cores": os.cpu_count(), "load_average": list(os.getloadavg()), "probes": probes,
              "wakeup_latency": wakeup_latency(),
              "note": ("no rate was faithful: the ceiling is unknown, experiments fall back to the default"
                       if good is None else f"first unfaithful rate: {ladder(start, bad)} Mb/s" if bad is not None
                       else f"faithful up to the search limit {limit} Mb/s")}
    if probe_fn is not None:
        return record                  # a dry search (tests): nothing stored
    if good is not None:
        path = save_calibration(record)
        print(f"fidelity ceiling: {ceiling:g} Mb/s per link ({workers} workers on one switch) -> {path}", file=log)
    else:
        print("no rate was faithful (is the machine overloaded?); nothing stored", file=log)
    w = record["wakeup_latency"]
    print(f"wake-up latency of a {w['wait_us']:g} us wait: median {w['median_us']} us, p99 {w['p99_us']} us "
          f"(timer slack {w['timer_slack_ns']} ns)", file=log)
    return record


def main(args) -> int:
    if os.geteuid() != 0:
        print("agglab calibrate needs root (Mininet): run it with sudo", file=sys.stderr)
        return 2
    if (args.workers < 2 or args.start <= 0 or args.factor <= 1 or args.limit < args.start
            or args.repeats < 1):
        print("agglab calibrate: need --workers >= 2, --start > 0, --factor > 1, --limit >= --start, "
              "--repeats >= 1", file=sys.stderr)
        return 2
    print(f"calibrating: {args.workers} workers on one switch, rates from {args.start:g} Mb/s x{args.factor:g} "
          f"(at most {args.limit:g}), faithful = within {args.tolerance:.0%} of the analytic wire time and "
          "bottleneck >= 90% busy", file=sys.stderr)
    record = calibrate(args.workers, args.start, args.factor, args.limit, args.refine, args.seconds, args.tolerance,
                       args.window, repeats=args.repeats)
    return 0 if record["ceiling_mbps"] else 1


def add_parser(sub) -> None:
    c = sub.add_parser("calibrate", help="measure this machine's fidelity ceiling (fastest faithful link rate) "
                       "and store it for the experiments")
    c.add_argument("--workers", type=int, default=8, help="workers on one switch (default 8)")
    c.add_argument("--start", type=float, default=2.0, help="first rate in Mb/s (default 2)")
    c.add_argument("--factor", type=float, default=2.0, help="step-up factor (default 2)")
    c.add_argument("--limit", type=float, default=200.0, help="highest rate tried, Mb/s (default 200)")
    c.add_argument("--refine", type=int, default=2, help="bisection steps after the step-up (default 2)")
    c.add_argument("--seconds", type=float, default=3.0, help="wire time of each probe (default 3 s)")
    c.add_argument("--window", type=int, default=16, help="outstanding slots per worker (default 16, as the "
                   "trend definitions use: a full default window queued at a few-Mb/s link outlasts the "
                   "workers' retransmission timers, and the duplicates, not the data, fill the link)")
    c.add_argument("--repeats", type=int, default=3, help="probes per rate; a rate is faithful when most of "
                   "them are (default 3: stops after 2 that agree)")
    c.add_argument("--tolerance", type=float, default=0.10, help="allowed excess over the analytic time (default 0.10)")
    c.set_defaults(func=main)
