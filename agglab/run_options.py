"""The run options every command that runs or draws a network shares: one option per field
of ground/runspec.py's RunSpec (`add_run_options`), read back into a RunSpec
(`spec_from_args`), and bad input said in one line with exit code 2 (`bad_input`).

Why a module of its own, below agglab/cli.py: the lab's `allreduce` line, `agglab draw` and
the benchmarks parse the same options, and they import these helpers from here, so the CLI
imports the commands and nothing imports the CLI back.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from dataclasses import fields

from agglab.controller import topologies
from agglab.controller.trees import TREE_ALGORITHMS as TREES
from agglab.ground import schemes
from agglab.ground import host_tcp
from agglab.ground.runspec import ATP_PS, BACKENDS, DTYPES, PATTERNS, PLACEMENTS, PS_LAYOUTS, RunSpec


def spec_from_args(args: argparse.Namespace) -> RunSpec:
    """The RunSpec the options describe: each option is the RunSpec field of the same name
    (options left unset keep the field's default), so no option list is restated here."""
    names = {f.name for f in fields(RunSpec)}
    return RunSpec(**{k: v for k, v in vars(args).items() if k in names and v is not None})


def bad_input(cmd: str, exc: Exception) -> int:
    """Say why `agglab CMD` refused its input in one line (no traceback); the exit code, 2."""
    print(f"agglab {cmd}: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}", file=sys.stderr)
    return 2


def _probabilities(text: str) -> list[float]:
    try:
        return [float(p) for p in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated probabilities, e.g. 0.1,0, got {text!r}") from None


def _seconds_list(text: str) -> list[float]:
    try:
        return [float(t) for t in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated seconds, e.g. 0,0.5, got {text!r}") from None


def add_run_options(parser: argparse.ArgumentParser, **defaults) -> None:
    """The RunSpec options, each named after its field (`--give-up` is `give_up`); defaults
    are RunSpec's unless a command overrides one (the lab opens a fat-tree)."""
    d = {f.name: f.default for f in fields(RunSpec) if f.default is not dataclasses.MISSING} | defaults
    opt = parser.add_argument
    opt("--workers", type=int, default=d["workers"], help=f"number of worker hosts (default {d['workers']})")
    opt("--elements", type=int, default=d["elements"], help=f"array length per worker (default {d['elements']})")
    opt("--dtype", choices=DTYPES, default=d["dtype"], help=f"gradient type: int32 sums exactly, float32 "
        f"travels as SwitchML fixed point (default {d['dtype']})")
    opt("--loss", type=float, default=d["loss"], help="drop probability per packet and direction, "
        "applied by the switch's drop simulator (default 0)")
    opt("--backend", choices=BACKENDS, default=d["backend"], help="data plane: the software switch or BMv2 "
        f"simple_switch (default {d['backend']})")
    opt("--window", type=int, default=d["window"], help="outstanding slots per worker (default: "
        + (f"{d['window']}" if d["window"] is not None else "the algorithm's own, ground/runspec.py") + ")")
    opt("--seed", type=int, default=d["seed"], help=f"seed of the workers' input arrays (default {d['seed']})")
    opt("--give-up", type=float, default=d["give_up"], help="seconds without progress before a worker "
        "gives up with an error")
    opt("--bw", type=float, default=d["bw"], help="link rate in Mb/s (tc htb); default unlimited")
    opt("--topology", default=d["topology"], help=f"{topologies.help_text()} (nodes, links, bandwidth); "
        f"default {d['topology']}")
    opt("--k", type=int, default=d["k"], help="fat-tree k (default 4) or BCube level count k")
    opt("--tree", default=d["tree"], choices=TREES,
        help=f"aggregation tree algorithm (default {d['tree']}; bml goes with bcube)")
    opt("--algorithm", choices=schemes.NAMES, default=d["algorithm"],
        help=f"aggregation scheme (default {d['algorithm']}): {schemes.help_text()}")
    opt("--density", type=float, default=d["density"], help="fraction of non-zero blocks (block-sparse data)")
    opt("--pattern", choices=PATTERNS, default=d["pattern"],
        help="block-sparse data: where the non-zero blocks are across workers")
    opt("--block-size", type=int, default=d["block_size"], help="omnireduce: values per block (multiple of K)")
    opt("--zero-workers", type=int, default=d["zero_workers"], metavar="Z",
        help="block-sparse data: ranks 0..Z-1 have no non-zero block at all (default 0)")
    opt("--bml-variant", choices=["in-network", "host"], default=d["bml_variant"],
        help="BML on BCube: level switches aggregate (in-network, default) or servers "
             "reduce-scatter/all-gather through them as in the paper (host)")
    opt("--jobs", type=int, default=d["jobs"], metavar="J",
        help="run J concurrent allreduces (tenants) of --workers each, on hosts of their own, sharing the "
             "switches and trees with disjoint slot ranges (default 1)")
    opt("--ps-layout", choices=PS_LAYOUTS, default=d["ps_layout"],
        help="--algorithm ps: sharded over every worker (default, BytePS' layout) or central (rank 0's host "
             "serves the whole array, as the PS RAT and ATP compare against)")
    opt("--atp-multicast", action="store_true", default=d["atp_multicast"] or None,
        help="--algorithm atp: the PS sends each result once and its ToR multicasts it to the job's workers "
             "(ATP's switch multicast; default: the PS unicasts it to every worker)")
    opt("--atp-ps", choices=ATP_PS, default=d["atp_ps"],
        help="--algorithm atp: rank 0's host is the PS and a worker (colocated, default) or the PS alone "
             "(separate: a server with no gradient of its own, as ATP's PS)")
    opt("--placement", choices=PLACEMENTS, default=d["placement"],
        help="with --jobs: spread puts each job's workers across racks (default), packed fills racks "
             "with one job's workers before the next job's (ATP's first level then sums in the rack)")
    opt("--atp-pool-slots", type=int, default=d["atp_pool_slots"], metavar="P",
        help="a pool of P aggregators per switch (at most ATP_POOL): --algorithm atp's jobs hash into P, "
             "a partitioned scheme's --jobs J each own P/J slots (their window at most that; default: "
             "the whole pool, the switch's slots)")
    opt("--iterations", type=int, default=d["iterations"], metavar="N",
        help="jobs that train: each job runs N iterations of compute then allreduce and reports "
             "iterations/s (default 1: one allreduce)")
    opt("--compute-ms", type=float, default=d["compute_ms"], metavar="MS",
        help="compute per iteration before each allreduce, emulated milliseconds (default 0)")
    opt("--compute-profile", default=d["compute_profile"], metavar="NAME",
        help="compute per iteration from a PACE layer profile (resnet50, vgg16, bert-base or a .yaml), "
             "scaled so compute and this gradient's transfer at --bw keep the model's proportions at 100 Gb/s")
    opt("--job-offsets", type=_seconds_list, default=None, metavar="T0,T1,..",
        help="with --jobs: seconds each job waits before its first iteration (staggered starts); one "
             "value T is a step: job j starts at j x T")
    opt("--job-loss", type=_probabilities, default=None, metavar="P0,P1,..",
        help="with --jobs: loss on each job's worker links (one probability per job; default --loss)")
    opt("--fail", action="append", metavar="A-B@FRACTION",
        help="take link A-B down when FRACTION of the blocks are done; 'tree@0.5' picks a "
             "link the active tree uses; may repeat")
    opt("--fail-switch", action="append", metavar="NAME@FRACTION",
        help="kill switch NAME's process (kill -9) when FRACTION of the blocks are done: all its links "
             "fail, the controller reroutes around it; 'tree@0.5' picks an aggregating switch of the "
             "active tree that is not some worker's only edge switch; may repeat")
    opt("--hang-switch", action="append", metavar="NAME@FRACTION",
        help="stop switch NAME's process (SIGSTOP: hung, not dead) when FRACTION of the blocks are done; "
             "the liveness probe declares it hung within 0.6 s and it is fenced and rerouted around like "
             "a killed switch; 'tree@0.5' as for --fail-switch; may repeat")
    opt("--chaos", type=int, metavar="SEED", default=d["chaos"],
        help="a seeded fault schedule during the run: link flaps, switch kills and restarts, hangs and "
             "loss bursts at seeded progress shares, targets drawn before the start (emulation/chaos.py); "
             "every job ends exact or with a clean "
             "partition error, and the JSON lists each fault with its recovery times")
    opt("--keep", metavar="DIR", default=d["keep"],
        help="when the run ends, keep its directory in DIR (new or empty): per-switch logs, the "
             "control commands sent, events, worker logs and reports, the JSON result")
    opt("--cluster", metavar="FILE", default=d["cluster"],
        help="run the network on the servers of this cluster file (YAML list of servers: address, user, "
             "cores; `agglab cluster local up` makes a practice one); see docs/guide/cluster.md")
    opt("--tcp-cc", choices=host_tcp.CONGESTION_CONTROLS, default=d["tcp_cc"],
        help=f"the hosts' TCP congestion control, pinned in every host namespace (default {d['tcp_cc']}, "
        "Linux's; ground/host_tcp.py)")
    opt("--pcap", action="store_true", default=d["pcap"] or None,
        help="the switches write per-port pcaps (DIR/pcaps/IFNAME_in.pcap, _out.pcap; with --keep)")
