"""The `agglab` command line.

    agglab allreduce --workers N --elements M [--dtype int32|float32] [--loss P]
                     [--backend soft|bmv2] [--window S] [--seed N] [--json]
    agglab train        a model trained through the switches; FIFO vs PACE (--profile-only)
    agglab clean        remove what a crashed run left (namespaces, interfaces, processes)
    agglab doctor       say what is installed and what is missing, and why it matters
    agglab exercise     teaching labs: list, start N, check N [--json], solution N
"""

from __future__ import annotations

import argparse
import json
import os
import sys


def _allreduce(args) -> int:
    from emulation.session import run_allreduce

    if os.geteuid() != 0:
        print("agglab allreduce needs root (Mininet creates network namespaces): run it with sudo",
              file=sys.stderr)
        return 2
    try:
        result = run_allreduce(quiet=args.json, workers=args.workers, elements=args.elements,
                               dtype=args.dtype, loss=args.loss, backend=args.backend,
                               window=args.window, seed=args.seed, give_up=args.give_up, bw=args.bw,
                               topology=args.topology, k=args.k, tree=args.tree, fail=args.fail or [],
                               bml_variant=args.bml_variant, algorithm=args.algorithm, density=args.density,
                               pattern=args.pattern, block_size=args.block_size,
                               zero_workers=args.zero_workers)
    except ValueError as exc:
        print(f"agglab allreduce: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(result, sort_keys=True))
    else:
        _print_human(result)
    return 0 if result["ok"] else 1


def _print_human(r: dict) -> None:
    if r.get("errors"):
        print("FAILED:")
        for err in r["errors"]:
            print("  " + err.splitlines()[0])
        return
    for f in r.get("failures", []):
        print(f"link {f['link']} failed at {f['at']:.0%}: detected in {f['detect_ms']} ms, "
              f"recomputed in {f['recompute_ms']} ms, installed in {f['install_ms']} ms"
              + ("" if f["on_tree"] else " (not on an active tree: nothing reinstalled)"))
    bound = f" (bound {r['error_bound']:.3g})" if r["dtype"] == "float32" else ""
    print(f"{'exact' if r['exact'] else 'NOT EXACT'}: {r['workers']} workers x {r['elements']} {r['dtype']} "
          f"on {r['backend']} in {r['seconds']:.3f} s, {r['goodput_mbps']:.1f} Mb/s per worker, "
          f"{r['packets']} packets, {r['retransmissions']} retransmissions, "
          f"max abs error {r['max_abs_error']:.3g}{bound}")


def _lab(args) -> int:
    from agglab.lab import run_lab
    from ground.runspec import RunSpec

    if os.geteuid() != 0:
        print("agglab lab needs root (Mininet): run it with sudo", file=sys.stderr)
        return 2
    try:
        spec = RunSpec(workers=args.workers, topology=args.topology, k=args.k, tree=args.tree,
                       backend=args.backend, loss=args.loss, bw=args.bw, elements=args.elements)
        return run_lab(spec, script=args.script)
    except ValueError as exc:
        print(f"agglab lab: {exc}", file=sys.stderr)
        return 2


def _clean(args) -> int:
    from ground.rundir import clean

    clean(everything=args.all)
    return 0


def _doctor(args) -> int:
    from agglab.doctor import report

    return report()


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="agglab", description="In-network aggregation emulator "
                                 "(SwitchML-style P4 pipelines on BMv2 or a software switch in Mininet)")
    sub = ap.add_subparsers(dest="cmd", required=True)

    a = sub.add_parser("allreduce", help="run one allreduce in a fresh network and check it against numpy")
    a.add_argument("--workers", type=int, default=4, help="number of worker hosts (default 4)")
    a.add_argument("--elements", type=int, default=100_000, help="array length per worker")
    a.add_argument("--dtype", choices=["int32", "float32"], default="int32")
    a.add_argument("--loss", type=float, default=0.0, help="drop probability per packet and direction, "
                   "applied by the switch's drop simulator (default 0)")
    a.add_argument("--backend", choices=["soft", "bmv2"], default="soft")
    a.add_argument("--window", type=int, default=None, help="outstanding slots per worker")
    a.add_argument("--seed", type=int, default=0)
    a.add_argument("--give-up", type=float, default=10.0, help="seconds without progress before a worker "
                   "gives up with an error")
    a.add_argument("--bw", type=float, default=None, help="link rate in Mb/s (tc htb); default unlimited")
    a.add_argument("--topology", default="single", help="single (default), leafspine, fattree, bcube "
                   "or a YAML file (nodes, links, bandwidth)")
    a.add_argument("--k", type=int, default=None, help="fat-tree k (default 4) or BCube level count k")
    a.add_argument("--tree", default="spt", choices=["spt", "rat", "packing", "bml"],
                   help="aggregation tree algorithm (default spt)")
    a.add_argument("--algorithm", choices=["switchml", "omnireduce"], default="switchml",
                   help="dense SwitchML pipeline (default) or block-sparse OmniReduce pipeline")
    a.add_argument("--density", type=float, default=1.0, help="omnireduce: fraction of non-zero blocks")
    a.add_argument("--pattern", choices=["random", "overlap", "disjoint"], default="random",
                   help="omnireduce: where the non-zero blocks are across workers")
    a.add_argument("--block-size", type=int, default=None, help="omnireduce: values per block (multiple of K)")
    a.add_argument("--zero-workers", type=int, default=0, metavar="Z",
                   help="omnireduce: ranks 0..Z-1 have no non-zero block at all (default 0)")
    a.add_argument("--bml-variant", choices=["in-network", "host"], default="in-network",
                   help="BML on BCube: level switches aggregate (in-network, default) or servers "
                        "reduce-scatter/all-gather through them as in the paper (host)")
    a.add_argument("--fail", action="append", metavar="A-B@FRACTION",
                   help="take link A-B down when FRACTION of the blocks are done; 'tree@0.5' picks a "
                        "link the active tree uses; may repeat")
    a.add_argument("--json", action="store_true", help="print one JSON object")
    a.set_defaults(func=_allreduce)

    lab = sub.add_parser("lab", help="interactive Mininet CLI with fail/recover/trees/allreduce/slots/stats/events")
    lab.add_argument("--topology", default="fattree")
    lab.add_argument("--k", type=int, default=None)
    lab.add_argument("--workers", type=int, default=8)
    lab.add_argument("--tree", default="rat", choices=["spt", "rat", "packing"])
    lab.add_argument("--backend", choices=["soft", "bmv2"], default="soft")
    lab.add_argument("--loss", type=float, default=0.0)
    lab.add_argument("--bw", type=float, default=None)
    lab.add_argument("--elements", type=int, default=200_000, help="default size of 'allreduce'")
    lab.add_argument("--script", default=None, help="run the lab commands in this file, then exit")
    lab.set_defaults(func=_lab)

    from agglab.train_cmd import add_train_parser
    add_train_parser(sub)

    c = sub.add_parser("clean", help="remove what crashed runs left behind (idempotent)")
    c.add_argument("--all", action="store_true", help="also stop runs whose owner is still alive")
    c.set_defaults(func=_clean)

    d = sub.add_parser("doctor", help="check the installation")
    d.set_defaults(func=_doctor)

    from agglab.exercise import add_parser as add_exercise_parser   # teaching labs (issue 14)
    add_exercise_parser(sub)
    return ap


def main(argv: list[str] | None = None) -> int:
    from agglab.interrupts import run_interruptible

    args = build_parser().parse_args(argv)
    return run_interruptible(args.cmd, lambda: args.func(args))


if __name__ == "__main__":
    sys.exit(main())
