"""Entry point of one worker process inside a Mininet host namespace.

Generates its gradient from (rank, seed), runs the allreduce through the switch and
writes the result (.npy) and its statistics (.json) for the checker in agglab/run.py.
Errors are written to the JSON too, so the parent can report them by rank.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback

import numpy as np

from agglab import wire
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
    ap.add_argument("--epoch-file", default=None, help="JSON the controller rewrites on reroute")
    ap.add_argument("--progress", default=None, help="file to rewrite with 'done total' blocks")
    ap.add_argument("--algorithm", choices=["switchml", "omnireduce"], default="switchml",
                    help="dense SwitchML pipeline or block-sparse OmniReduce pipeline")
    ap.add_argument("--density", type=float, default=1.0, help="omnireduce: fraction of non-zero blocks")
    ap.add_argument("--pattern", choices=["random", "overlap", "disjoint"], default="random",
                    help="omnireduce: where the non-zero blocks are across workers")
    ap.add_argument("--block-size", type=int, default=None, help="omnireduce: values per block (multiple of K)")
    ap.add_argument("--zero-workers", type=int, default=0, help="ranks below this have no non-zero block")
    ap.add_argument("--bml-plan", default=None, help="BML on BCube: this server's plan (JSON)")
    ap.add_argument("--out", required=True, help="path prefix for .npy and .json")
    args = ap.parse_args(argv)

    from hosts.agent import UdpTransport, allreduce

    report: dict = {"rank": args.rank, "ok": False}
    try:
        elements = args.length_override or args.elements
        if args.algorithm == "omnireduce" or args.density < 1.0:   # block-sparse data, either pipeline
            from hosts.sparse_workload import sparse_gradient

            block_size = args.block_size or wire.K
            data = sparse_gradient(args.rank, elements, args.dtype, args.density, args.pattern,
                                   block_size, args.seed, args.zero_workers)
            options = {"sparse": True, "block_size": block_size} if args.algorithm == "omnireduce" else {}
        else:
            data, options = make_gradient(args.rank, elements, args.dtype, args.seed), {}
        started = time.monotonic()
        if args.bml_plan:
            return _finish(args, report, *_run_bml(args, data, started))
        transport = UdpTransport(args.local_ip, args.service_ip)
        watcher = EpochFile(args.epoch_file) if args.epoch_file else None
        first = watcher.poll() if watcher else None
        result, stats = allreduce(data, transport=transport, rank=args.rank, workers=args.workers,
                                  job=args.job, window=args.window, give_up=args.give_up,
                                  epoch=first["epoch"] if first else 0,
                                  tree_of_slot=first["tree_of_slot"] if first else None,
                                  control=watcher.poll if watcher else None,
                                  on_progress=ProgressFile(args.progress) if args.progress else None,
                                  return_stats=True, **options)
        report.update(ok=True, wall=time.monotonic() - started, **_stats_dict(stats))
        report.setdefault("blocks_sent", report.get("blocks", 0))   # dense: every block travels
        np.save(args.out + ".npy", result)
    except Exception as exc:  # reported to the parent by rank, with the reason
        report.update(error=f"{type(exc).__name__}: {exc}", traceback=traceback.format_exc())
    with open(args.out + ".json", "w") as f:
        json.dump(report, f)
    return 0 if report["ok"] else 1


class EpochFile:
    """The controller's epoch file: poll() returns its content when it changed, else None.

    Why a file: agents run in other network namespaces but share the filesystem; the
    controller replaces it atomically. Why compare the bytes, not the mtime: a reroute
    writes it several times within milliseconds ("rerouting", then the new epoch), and a
    filesystem's timestamp granularity (a jiffy on some) can give two versions the same
    mtime, so an agent that saw the first would never see the second. Reading ~200 bytes
    every poll (5 ms) costs microseconds.
    """

    def __init__(self, path: str):
        self.path = path
        self.seen: bytes | None = None

    def poll(self) -> dict | None:
        try:
            with open(self.path, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            return None
        if data == self.seen:
            return None
        self.seen = data
        return json.loads(data)


class ProgressFile:
    """Rewrites 'done total' (blocks) at most every 10 ms, for scripted failures."""

    def __init__(self, path: str):
        self.path, self.last = path, 0.0

    def __call__(self, done: int, total: int) -> None:
        now = time.monotonic()
        if now - self.last >= 0.01 or done == total:
            self.last = now
            tmp = self.path + ".tmp"
            with open(tmp, "w") as f:
                f.write(f"{done} {total}")
            os.replace(tmp, self.path)


def _run_bml(args, data, started):
    with open(args.bml_plan) as f:
        plan = json.load(f)
    if plan["variant"] == "host":
        from hosts.bml_host import plan_from_json, run_host_bml

        nic_ip = {tuple([k.split("|")[0], int(k.split("|")[1])]): ip for k, ip in plan["nic_ip"].items()}
        me = plan["me"]
        result, stats = run_host_bml(data, me, plan_from_json(plan["schedule"]), nic_ip,
                                     timeout=args.give_up * 3, return_stats=True)
        stats = {"packets_sent": 0, "retransmissions": 0, "bytes_sent": _get(stats, "bytes_sent")}
    else:
        from hosts.bml import allreduce_bml

        result, stats = allreduce_bml(data, plan, args.service_ip, give_up=args.give_up)
    stats["seconds"] = time.monotonic() - started
    return result, stats


def _get(stats, key):
    return stats.get(key, 0) if isinstance(stats, dict) else getattr(stats, key, 0)


def _finish(args, report, result, stats) -> int:
    report.update(ok=True, **stats)
    np.save(args.out + ".npy", result)
    with open(args.out + ".json", "w") as f:
        json.dump(report, f)
    return 0


def _stats_dict(stats) -> dict:
    if hasattr(stats, "__dataclass_fields__"):
        from dataclasses import asdict

        return asdict(stats)
    return dict(vars(stats))


if __name__ == "__main__":
    sys.exit(main())
