"""`agglab train`: a real model trained through the emulated network, or a layer profile's
iteration under FIFO and PACE (`--profile-only`).

    agglab train --workers 4 --model mlp --dataset digits [--algorithm SCHEME]
                 [--loss P] [--fail tree@0.5] [--topk F] [--dtype int32|float32] [--json]
    agglab train --model resnet50 --profile-only --scheduler fifo|pace|both --workers 8 [--json]
    agglab train --model vgg16 --profile-only --no-network      # the pure model only
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from agglab.controller import topologies
from agglab.controller.trees import SWITCH_TREES
from agglab.controller.trees.base import TreeError
from agglab.ground import schemes
from agglab.ground.runspec import RunSpec

PROFILE_MODELS = ("resnet50", "vgg16", "bert-base")


EXAMPLES = """examples:
  sudo agglab train                                   # the MLP on digits, 4 workers, one switch
  sudo agglab train --workers 8 --topology fattree --loss 0.01 --fail tree@0.5
  sudo agglab train --algorithm omnireduce --topk 0.1 # only the top 10% of gradient blocks travel
  agglab train --model resnet50 --profile-only --no-network --workers 8    # FIFO vs PACE, the model alone
"""


def add_train_parser(sub) -> None:
    t = sub.add_parser("train", help="train a model data-parallel through the emulated switches, or "
                       "compare FIFO and PACE gradient scheduling on a layer profile (--profile-only)",
                       epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    t.add_argument("--model", default="mlp", help="mlp (trained on --dataset), or with --profile-only: "
                   f"{', '.join(PROFILE_MODELS)} or a profile .yaml")
    t.add_argument("--dataset", default="digits", choices=["digits"], help="scikit-learn's digits (shipped)")
    t.add_argument("--workers", type=int, default=4, help="worker hosts, each training its shard (default 4)")
    t.add_argument("--algorithm", default=schemes.DEFAULT,
                   help=f"aggregation scheme: {schemes.help_text()} (with --topk F only the top F of the "
                   "blocks travel)")
    t.add_argument("--dtype", choices=["int32", "float32"], default="int32",
                   help="int32: fixed-point gradients, exact aggregation, identical to one process "
                        "(default); float32: the switch's float path")
    t.add_argument("--topk", type=float, default=1.0, metavar="F",
                   help="send only the fraction F of gradient blocks with the largest norm (error feedback)")
    t.add_argument("--steps", type=int, default=120, help="training steps, one allreduce each (default 120)")
    t.add_argument("--batch", type=int, default=32, help="samples per worker and step")
    t.add_argument("--lr", type=float, default=0.5, help="learning rate of plain SGD (default 0.5)")
    t.add_argument("--seed", type=int, default=0, help="seed of the data split and initial parameters (default 0)")
    t.add_argument("--loss", type=float, default=0.0, help="drop probability per packet and direction")
    t.add_argument("--fail", action="append", metavar="A-B@FRACTION",
                   help="take link A-B down at FRACTION of the training steps ('tree@0.5': a tree link)")
    t.add_argument("--topology", default="single", help=f"{topologies.help_text()} (default single)")
    t.add_argument("--k", type=int, default=None, help="fat-tree k (default 4) or BCube level count k")
    t.add_argument("--tree", default="spt", choices=SWITCH_TREES,
                   help="aggregation tree algorithm, a module of controller/trees/ (default spt)")
    t.add_argument("--bw", type=float, default=None, help="emulated link rate in Mb/s (tc htb); "
                   "--profile-only defaults to 5")
    t.add_argument("--backend", choices=["soft", "bmv2"], default="soft",
                   help="data plane: the software switch or BMv2 simple_switch (default soft)")
    t.add_argument("--give-up", type=float, default=10.0,
                   help="seconds without progress before a worker gives up with an error (default 10)")
    t.add_argument("--keep", metavar="DIR", default=None, help="keep the run directory in DIR (new or empty): "
                   "switch logs, SWITCH.commands, events.log, worker logs (as `agglab allreduce --keep`)")
    t.add_argument("--pcap", action="store_true", help="per-port pcaps into DIR/pcaps (with --keep)")
    t.add_argument("--cluster", metavar="FILE", default=None, help="run the network on the servers of this "
                   "cluster file (as `agglab allreduce --cluster`; docs/guide/cluster.md)")
    t.add_argument("--profile-only", action="store_true", help="simulate compute from the model's layer "
                   "profile; run only the gradient communication (through the network unless --no-network)")
    t.add_argument("--scheduler", choices=["fifo", "pace", "both"], default="both",
                   help="--profile-only: which gradient scheduler(s) to run (default both)")
    t.add_argument("--no-network", action="store_true", help="--profile-only: the pure model, no emulator")
    t.add_argument("--link-gbps", type=float, default=10.0, help="real-network link rate modelled (Gb/s)")
    t.add_argument("--alpha-us", type=float, default=50.0, help="start-up cost of one allreduce (us)")
    t.add_argument("--partition-mb", type=float, default=4.0, help="PACE chunk size (MB)")
    t.add_argument("--threshold-mb", type=float, default=64.0, help="FIFO fusion buffer (MB)")
    t.add_argument("--cycle-ms", type=float, default=5.0, help="FIFO cycle time (ms)")
    t.add_argument("--emulated-mb", type=float, default=4.0,
                   help="gradient MB per worker and iteration sent through the emulator (sets the shrink)")
    t.add_argument("--plan-cost", choices=["measured", "model"], default="measured",
                   help="plan the schedules with the emulated network's calibrated alpha+beta*s "
                        "(default) or with the modelled real network's")
    t.add_argument("--out", default="results/train", help="directory the plot (train.png) or, with "
                   "--profile-only, the PACE timeline and trace go to (default results/train); the "
                   "result itself is printed, as one JSON object with --json")
    t.add_argument("--json", action="store_true", help="print the result as one JSON object on stdout")
    t.set_defaults(func=run_train)


def _per_scheduler(ms) -> str:
    """{'fifo': 126.656, 'pace': 105.14} -> 'FIFO 126.7 ms, PACE 105.1 ms' (a bare number as is)."""
    if isinstance(ms, dict):
        return ", ".join(f"{name.upper()} {value:.1f} ms" for name, value in ms.items())
    return f"{ms:.1f} ms" if isinstance(ms, (int, float)) else str(ms)


def _spec(args):
    return RunSpec(workers=args.workers, loss=args.loss, backend=args.backend, seed=args.seed,
                   give_up=args.give_up, bw=args.bw, topology=args.topology, k=args.k, tree=args.tree,
                   algorithm=args.algorithm, fail=args.fail or [], keep=args.keep, pcap=args.pcap,
                   cluster=args.cluster).validate()


def run_train(args) -> int:
    needs_root = not (args.profile_only and args.no_network)
    if needs_root:
        try:                                # bad input first: one line before "needs root"
            from agglab.emulation.session import graph_for  # lazy: loads numpy, pyroute2, only run_train() needs it

            graph_for(_spec(args))
        except (ValueError, TreeError) as exc:
            print(f"agglab train: {str(exc).splitlines()[0]}", file=sys.stderr)
            return 2
    if needs_root and os.geteuid() != 0:
        print("agglab train needs root (Mininet creates network namespaces): run it with sudo, "
              "or --profile-only --no-network for the pure model", file=sys.stderr)
        return 2
    try:
        if args.profile_only:
            result = _profile(args)
        else:
            result = _mlp(args)
    except (ValueError, TreeError) as exc:       # TopologyError is a ValueError
        print(f"agglab train: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps({k: v for k, v in result.items() if k != "events"}, sort_keys=True))
    else:
        _print_human(result)
    return 0 if result["ok"] else 1


def _mlp(args) -> dict:
    from agglab.emulation.training import run_training  # lazy: loads numpy, pyroute2, only _mlp() needs it
    from agglab.hosts.mlp import Config  # lazy: loads numpy, only _mlp() needs it

    if args.model != "mlp":
        raise ValueError(f"--model {args.model}: only mlp trains for real; {', '.join(PROFILE_MODELS)} "
                         "go with --profile-only")
    cfg = Config(workers=args.workers, steps=args.steps, batch=args.batch, lr=args.lr, seed=args.seed,
                 dtype=args.dtype, topk=args.topk)
    return run_training(_spec(args), cfg, Path(args.out), quiet=args.json)


def _profile(args) -> dict:
    from agglab.emulation.pace_run import PaceOptions, run_profile  # lazy: loads numpy, pyroute2, only _profile() needs it

    opts = PaceOptions(args.link_gbps, args.alpha_us, args.partition_mb, args.threshold_mb, args.cycle_ms,
                       args.emulated_mb, args.plan_cost)
    schedulers = ["fifo", "pace"] if args.scheduler == "both" else [args.scheduler]
    return run_profile(_spec(args), args.model, schedulers, opts, Path(args.out),
                       emulate=not args.no_network, quiet=args.json)


def _print_human(r: dict) -> None:
    if r.get("errors"):
        print("FAILED:")
        for err in r["errors"]:
            print("  " + err.splitlines()[0])
        return
    if "profile" in r:
        where = (f"through the emulator at {r['bw_mbps']} Mb/s (scale {r['scale']}, shrink {r['shrink']}, "
                 f"{'link-bound' if r['link_bound'] else 'NOT link-bound'})" if r["emulated"] else "pure model")
        print(f"{r['profile']}, {r['workers']} workers, {r['algorithm']} on a {r['link_gbps']} Gb/s network, "
              f"{where}: compute {r['compute_ms']} ms")
        if r["emulated"]:
            c, m = r["emulated_cost"], r["model_cost"]
            print(f"  cost per allreduce, real-network units: measured alpha {c['alpha_ms']} ms + beta "
                  f"{c['ms_per_mb']} ms/MB; model alpha {m['alpha_ms']} ms + beta {m['ms_per_mb']} ms/MB; "
                  f"schedules planned with the {r['plan_cost']} cost; {r['retransmissions']} retransmissions")
        print(f"  iteration time: {_per_scheduler(r['iteration_ms'])} "
              f"(pure model: {_per_scheduler(r['model_iteration_ms'])})")
        if "speedup" in r:
            with_measured = (f", {r['measured_cost_speedup']}x with the measured cost"
                             if "measured_cost_speedup" in r else "")
            print(f"  PACE speed-up over FIFO: {r['speedup']}x (model {r['model_speedup']}x{with_measured})")
        print(f"  timeline {r['timeline']}, trace {r['trace']} (Perfetto / chrome://tracing)")
        return
    verdict = "identical to" if r["max_abs_param_diff"] == 0 else "differs from"
    print(f"{'OK' if r['ok'] else 'MISMATCH'}: mlp on digits, {r['workers']} workers, {r['algorithm']} "
          f"({r['dtype']}, top-k {r['topk']}), {r['steps']} steps in {r['seconds']} s, "
          f"packet loss {r['loss'] * 100:g}% per link direction, {r['retransmissions']} retransmissions")
    print(f"  test accuracy {r['final_accuracy']:.4f} through the switches vs {r['single_process_accuracy']:.4f} "
          f"in one process; parameters {verdict} the one-process run (max |diff| {r['max_abs_param_diff']:.3g})")
    c = r.get("cost") or {}
    if "alpha_ms" in c:
        model = (f"; link model alpha {c['model_alpha_ms']} ms + beta {c['model_ms_per_mb']} ms/MB"
                 if "model_ms_per_mb" in c else "")
        print(f"  per allreduce call ({c['calls']} calls, emulated network's units): alpha {c['alpha_ms']} ms + "
              f"beta {c['ms_per_mb']} ms/MB (fitted: {c['fitted']}){model}")
    for f in r.get("failures", []):
        print(f"  link {f['link']} failed at {f['at']:.0%} of the steps: detected in {f['detect_ms']} ms")
    print(f"  plot {r['plot']}")
