"""Entry point of one worker process inside a Mininet host namespace.

Generates its gradient from (rank, seed), runs the allreduce through the switch and
writes the result (.npy) and its statistics (.json) for the checker in agglab/run.py.
Errors are written to the JSON too, so the parent can report them by rank.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import traceback

import numpy as np

from hosts.workload import make_gradient


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="agglab worker (runs inside a host namespace)")
    ap.add_argument("--rank", type=int, required=True)
    ap.add_argument("--workers", type=int, required=True)
    ap.add_argument("--elements", type=int, required=True)
    ap.add_argument("--dtype", default="int32")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--local-ip", required=True)
    ap.add_argument("--service-ip", required=True)
    ap.add_argument("--job", type=int, default=0)
    ap.add_argument("--window", type=int, default=None)
    ap.add_argument("--give-up", type=float, default=10.0)
    ap.add_argument("--length-override", type=int, default=None,
                    help="send an array of this length instead (to test mismatch detection)")
    ap.add_argument("--out", required=True, help="path prefix for .npy and .json")
    args = ap.parse_args(argv)

    from hosts.agent import UdpTransport, allreduce

    report: dict = {"rank": args.rank, "ok": False}
    try:
        data = make_gradient(args.rank, args.length_override or args.elements, args.dtype, args.seed)
        transport = UdpTransport(args.local_ip, args.service_ip)
        started = time.monotonic()
        result, stats = allreduce(data, transport=transport, rank=args.rank, workers=args.workers,
                                  job=args.job, window=args.window, give_up=args.give_up,
                                  return_stats=True)
        report.update(ok=True, wall=time.monotonic() - started, **_stats_dict(stats))
        np.save(args.out + ".npy", result)
    except Exception as exc:  # reported to the parent by rank, with the reason
        report.update(error=f"{type(exc).__name__}: {exc}", traceback=traceback.format_exc())
    with open(args.out + ".json", "w") as f:
        json.dump(report, f)
    return 0 if report["ok"] else 1


def _stats_dict(stats) -> dict:
    if hasattr(stats, "__dataclass_fields__"):
        from dataclasses import asdict

        return asdict(stats)
    return dict(vars(stats))


if __name__ == "__main__":
    sys.exit(main())
