"""The `agglab` command line.

    agglab allreduce [RUN OPTIONS] [--json]   one allreduce in a fresh network, checked against numpy
    agglab lab [RUN OPTIONS] [--script FILE]  the Mininet CLI with fail/recover/trees/allreduce/...
    agglab train [RUN OPTIONS] ...    a model trained through the switches; FIFO vs PACE (--profile-only)
    agglab draw TOPOLOGY [RUN OPTIONS] -o FILE.svg   the topology and its trees (--fail A-B: rerouted)
    agglab experiment [FILE.yaml|default|quick]   run paper trends, write results/<name>/report.md
    agglab calibrate    measure this machine's fidelity ceiling (fastest faithful link rate)
    agglab clean        remove what a crashed run left (namespaces, interfaces, processes)
    agglab doctor       say what is installed and what is missing, and why it matters
    agglab exercise     exercises: list, start N, check N [--json], solution N, grade N DIR

RUN OPTIONS are the fields of ground/runspec.py's RunSpec, one option per field
(agglab/run_options.py); bad input (a bad field, topology or tree) prints one line and exits 2.
This module only assembles the commands: it imports them, and none of them imports it.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from agglab.calibrate import add_parser as add_calibrate
from agglab.cluster_cmd import add_cluster_parser   # cluster mode (Mininet's cluster edition)
from agglab.doctor import report
from agglab.draw_cmd import add_parser as add_draw_parser
from agglab.exercise_cmd import add_parser as add_exercise_parser   # the exercises
from agglab.run_options import add_run_options, bad_input, spec_from_args
from agglab.train_cmd import add_train_parser
from agglab.vectors_cmd import add_parser as add_vectors_parser   # replay vector files
from agglab.web import add_web_options, web_options
from agglab.controller import topologies
from agglab.controller.trees import SWITCH_TREES
from agglab.controller.trees.base import TreeError
from agglab.ground import wire
from agglab.ground.oneline_parser import OneLineParser
from agglab.ground.cleanup import clean, live_runs, orphan_namespaces
from agglab.ground.interrupts import run_interruptible


def _checked_spec(cmd: str, args):
    """Validate the options and build the topology graph (no root needed): bad input fails
    here with one line, before any network exists. Returns the CheckedRun the session takes
    (controller/run_check.py: checked once)."""
    from agglab.controller.run_check import check_run  # lazy: loads numpy, only _checked_spec() needs it

    return check_run(spec_from_args(args))


def _needs_root(cmd: str) -> bool:
    if os.geteuid() != 0:
        print(f"agglab {cmd} needs root (Mininet creates network namespaces): run it with sudo", file=sys.stderr)
        return True
    return False


def _allreduce(args) -> int:
    from agglab.emulation.session import run_spec  # lazy: loads numpy, pyroute2, only _allreduce() needs it

    try:
        spec = _checked_spec("allreduce", args)

        web = web_options(args)
        if _needs_root("allreduce"):
            return 2
        if web:
            from agglab.web.server import run_with_page     # lazy: aiohttp: loaded only with --web

            result = run_with_page(spec, web, quiet=args.json, progress=args.progress or sys.stderr.isatty())
        else:
            result = run_spec(spec, quiet=args.json, progress=args.progress or sys.stderr.isatty())
    except (ValueError, TreeError) as exc:       # TopologyError is a ValueError
        return bad_input("allreduce", exc)
    if args.json:
        print(json.dumps(result, sort_keys=True))
    else:
        _print_human(result)
    return 0 if result["ok"] else 1


def _print_human(r: dict) -> None:
    if r.get("kept"):
        print(f"run kept in {os.path.dirname(r['kept'])}: switch logs, SWITCH.commands (control calls), "
              "events.log, run1/ (run.json, worker logs, result.json), pcaps/ with --pcap", file=sys.stderr)
    if r.get("errors"):
        print("FAILED:")
        for err in r["errors"]:
            print("  " + err.splitlines()[0])
        return
    for f in r.get("failures", []):
        what = f"switch {f['switch']}" if f.get("switch") else f"link {f['link']}"
        print(f"{what} failed at {f['at']:.0%}: detected in {f['detect_ms']} ms, "
              f"recomputed in {f['recompute_ms']} ms, installed in {f['install_ms']} ms"
              + ("" if f["on_tree"] else " (not on an active tree: nothing reinstalled)"))
    bound = f" (bound {r['error_bound']:.3g})" if r["dtype"] == "float32" else ""
    jobs = r.get("jobs", [])
    if len(jobs) > 1:
        for j in jobs:
            slots = ("the shared pool" if j.get("slots") is None      # atp: no slot range of its own
                     else f"slots {j['slot_base']}..{j['slot_base'] + j['slots'] - 1}")
            print(f"  job {j['job']} ({len(j['hosts'])} workers on {','.join(j['hosts'])}, {slots}, "
                  f"packet loss {j['loss'] * 100:g}%): "
                  f"{'exact' if j['exact'] else 'NOT EXACT'} in {j['seconds']:.3f} s, "
                  f"{j['retransmissions']} retransmissions")
    print(f"{'exact' if r['exact'] else 'NOT EXACT'}: "
          + (f"{len(jobs)} jobs of " if len(jobs) > 1 else "") + f"{r['workers']} workers x {r['elements']} {r['dtype']} "
          + (f"({r['values_per_packet']} per packet) " if r.get("values_per_packet", wire.K) != wire.DEFAULT_K
             else "")
          + f"on {r['backend']} in {r['seconds']:.3f} s, {r['goodput_mbps']:.1f} Mb/s per worker, "
          f"{r['packets']} packets, {r['retransmissions']} retransmissions, "
          f"max abs error {r['max_abs_error']:.3g}{bound}"
          + (f"; wire time {r['wire_seconds']:.3f} s" if r.get("wire_seconds") else ""))


def _lab(args) -> int:
    from agglab.lab import run_lab          # lazy: Mininet: loaded only by the commands that build a network

    try:
        spec = _checked_spec("lab", args)

        web = web_options(args)
        if args.script is not None:             # readable now, not when the network is up
            try:
                open(args.script).close()
            except OSError as exc:
                raise ValueError(f"--script {args.script}: {exc.strerror or exc}") from None
        if _needs_root("lab"):
            return 2
        return run_lab(spec, script=args.script, web=web)
    except (ValueError, TreeError) as exc:
        return bad_input("lab", exc)


def _experiment(args) -> int:
    """Hand over to `python -m agglab.experiments` with the remaining arguments."""
    os.execv(sys.executable, [sys.executable, "-m", "agglab.experiments", *args.rest])


def _clean(args) -> int:
    """`clean --all` stops live runs too: it lists them, and the namespaces agglab named whose
    maker is gone (which it removes), and asks on a terminal (or takes --yes); with neither it
    refuses in one line. It returns once their processes are gone."""
    stop = None
    if args.all:
        runs, orphans = live_runs(), orphan_namespaces()
        also = (f", and remove {len(orphans)} namespace(s) whose maker is gone" if orphans else "")
        if runs and not args.yes:
            if not sys.stdin.isatty():
                print(f"agglab clean --all: would stop {len(runs)} live run(s) ("
                      + "; ".join(r.line() for r in runs) + ")" + also
                      + (" (" + "; ".join(f.line() for f in orphans) + ")" if orphans else "")
                      + ": give --yes to stop them (no terminal to ask on)", file=sys.stderr)
                return 2
            print(f"agglab clean --all would stop {len(runs)} live run(s), and their networks{also}:")
            for r in runs:
                print(f"  {r.line()}")
            for f in orphans:
                print(f"  {f.line()}: gone")
            try:
                answer = input("stop them? [y/N] ")
            except EOFError:
                answer = ""
            if answer.strip().lower() not in ("y", "yes"):
                print("agglab clean --all: nothing stopped, nothing removed", file=sys.stderr)
                return 1
        elif orphans:
            print(f"agglab clean --all will remove {len(orphans)} namespace(s) whose maker is gone:")
            for f in orphans:
                print(f"  {f.line()}")
        stop = {r.path for r in runs}
    clean(everything=args.all, stop=stop)
    return 0


def _doctor(args) -> int:
    return report()


def build_parser() -> argparse.ArgumentParser:
    ap = OneLineParser(prog="agglab", description="In-network aggregation emulator "
                                 "(SwitchML-style P4 pipelines on BMv2 or a software switch in Mininet)")
    sub = ap.add_subparsers(dest="cmd", required=True)

    a = sub.add_parser("allreduce", help="run one allreduce in a fresh network and check it against numpy")
    add_run_options(a)
    a.add_argument("--json", action="store_true", help="print one JSON object")
    a.add_argument("--progress", action="store_true", help="a bar of blocks done and their rate on stderr "
                   "(default when stderr is a terminal; never on stdout)")
    add_web_options(a)
    a.set_defaults(func=_allreduce)

    lab = sub.add_parser("lab", help="interactive Mininet CLI with fail/recover/trees/allreduce/slots/stats/events")
    add_run_options(lab, topology="fattree", workers=8, tree="rat", elements=200_000)
    lab.add_argument("--script", default=None, help="run the lab commands in this file, then exit")
    add_web_options(lab)
    lab.set_defaults(func=_lab)

    add_train_parser(sub)
    add_draw_parser(sub)
    # experiments (layer 4, run as its own program: no sideways import) and calibration
    e = sub.add_parser("experiment", add_help=False, prefix_chars="+",    # every argument passes through
                       help="run a trend definition or suite (python -m agglab.experiments; see `agglab experiment --help`)")
    e.add_argument("rest", nargs="*")
    e.set_defaults(func=_experiment)
    add_calibrate(sub)

    c = sub.add_parser("clean", help="remove what crashed runs left behind (idempotent)")
    c.add_argument("--all", action="store_true", help="also stop runs whose owner is still alive (listed first; "
                   "asks on a terminal, else needs --yes), and delete interfaces named like agglab's that no run "
                   "records (not while another network holds the machine); namespaces agglab named whose maker is gone "
                   "(a killed test's, a killed run's) are listed and removed, by plain clean too")
    c.add_argument("--yes", "-y", action="store_true", help="with --all: stop the live runs without asking")
    c.set_defaults(func=_clean)

    d = sub.add_parser("doctor", help="check the installation")
    d.set_defaults(func=_doctor)

    x = sub.add_parser("export", help="write agglab's pipeline for another tool: "
                       "'p4app' = a p4-utils network (p4app.json + per-switch CLI files)")
    x.add_argument("format", choices=["p4app"])
    x.add_argument("topology", help=topologies.help_text())
    x.add_argument("--k", type=int, default=None, help="fat-tree k (default 4) or BCube level count k")
    x.add_argument("--workers", type=int, default=8, help="worker hosts the trees aggregate (default 8)")
    x.add_argument("--tree", default="rat", choices=SWITCH_TREES,
                   help="aggregation tree algorithm, a module of controller/trees/ (default rat)")
    x.add_argument("--bw", type=float, default=None, help="link rate in Mb/s written on every link")
    x.add_argument("--out", default="p4app", help="output directory (default ./p4app)")
    x.set_defaults(func=lambda args: __import__("agglab.export_p4app", fromlist=["main"]).main(args))
    add_exercise_parser(sub)
    add_cluster_parser(sub)
    add_vectors_parser(sub)
    return ap


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return run_interruptible(args.cmd, lambda: args.func(args))
    except Exception as exc:
        # a switch's control channel failed outside a handled failure (a hang or death is
        # handled by the switch watcher and probe): one line, not a traceback
        client = sys.modules.get("agglab.controller.switch_client")
        if client is None or not isinstance(exc, client.SwitchCommandError):
            raise
        print(f"agglab {args.cmd}: a switch stopped answering its controller: {str(exc).splitlines()[0]}",
              file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
