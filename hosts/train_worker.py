"""Entry point of one data-parallel training rank inside a Mininet host.

`python -m hosts.train_worker run.json RANK train.json`: trains hosts/mlp.py's model on
this rank's shard, summing the encoded gradients over the job through the emulated
network every step (hosts/communicator.py), and writes <out>.json (ok or error, the
loss/accuracy curve, allreduce statistics) and <out>.npy (final parameters).
"""

from __future__ import annotations

import argparse
import json
import time
import traceback
from dataclasses import fields

import numpy as np

from ground.runspec import RunPlan
from hosts.communicator import Communicator
from hosts.mlp import Config, train

COUNTED = ("packets_sent", "retransmissions", "blocks", "blocks_sent", "epoch_changes")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="one rank of `agglab train` (runs inside a host namespace)")
    ap.add_argument("plan", help="run.json written by the session (ground/runspec.py RunPlan)")
    ap.add_argument("rank", type=int)
    ap.add_argument("config", help="train.json: hosts.mlp.Config fields")
    args = ap.parse_args(argv)
    plan = RunPlan.read(args.plan)
    with open(args.config) as f:
        cfg = Config(**{k: v for k, v in json.load(f).items() if k in {x.name for x in fields(Config)}})
    seat = plan.seats[args.rank]
    report: dict = {"rank": args.rank, "ok": False}
    totals = dict.fromkeys(COUNTED, 0)
    try:
        comm = Communicator(plan, args.rank)
        started = time.monotonic()

        def reduce(encoded):
            total = comm.allreduce(encoded[0])
            for key in COUNTED:
                totals[key] += getattr(comm.last_stats, key, 0) or 0
            return total

        result = train(cfg, [args.rank], reduce, on_step=lambda step, _: comm.progress(step, cfg.steps))
        np.save(seat.out + ".npy", result["params"])
        report.update(ok=True, seconds=time.monotonic() - started, curve=result["curve"],
                      final_accuracy=result["final_accuracy"], allreduces=comm.calls, **totals)
    except Exception as exc:  # reported to the parent by rank, with the reason
        report.update(error=f"{type(exc).__name__}: {exc}", traceback=traceback.format_exc(), **totals)
    with open(seat.out + ".json", "w") as f:
        json.dump(report, f)
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
