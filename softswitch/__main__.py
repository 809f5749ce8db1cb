"""`python -m agglab.softswitch --name s1 --port 1=s1-eth1 ... --control /run/s1.sock`: run one switch.

One process per switch, like one simple_switch per switch under Mininet, so a
crash or a slow pipeline in one switch never stalls another.  See
softswitch/daemon.py for the event loop and softswitch/control.py for the
control protocol.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys

from agglab.ground.timerslack import set_timer_slack
from agglab.softswitch.daemon import Daemon


def _port(spec: str) -> tuple[int, str]:
    number, sep, ifname = spec.partition("=")
    if not sep or not number.isdigit() or not ifname:
        raise argparse.ArgumentTypeError(f"expected NUMBER=IFNAME, got {spec!r}")
    return int(number), ifname


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m agglab.softswitch", description=__doc__.splitlines()[0])
    ap.add_argument("--name", required=True, help="switch name (used in logs)")
    ap.add_argument("--port", type=_port, action="append", default=[], metavar="N=IFNAME",
                    help="attach port number N to interface IFNAME (repeat per port)")
    ap.add_argument("--control", required=True, metavar="PATH.sock", help="control socket path")
    ap.add_argument("--log", metavar="FILE", help="log file (default: stderr)")
    ap.add_argument("--pcap-dir", metavar="DIR", help="write DIR/IFNAME_in.pcap and _out.pcap")
    ap.add_argument("--seed", type=int, help="seed of the pipeline's random() (drop simulator)")
    ap.add_argument("--pidfile", metavar="FILE", help="write the pid here; removed on exit")
    ap.add_argument("--batch", type=int, default=64, help="max frames per port per loop turn")
    ap.add_argument("--coalesce", type=float, default=0.0, metavar="SECONDS",
                    help="after a turn of few frames, wait this long before looking again (default 0: never)")
    ap.add_argument("--stats-interval", type=float, default=10.0,
                    help="seconds between stats lines in the log (only when counters changed)")
    ap.add_argument("--pipeline", default="agglab.softswitch.pipeline:Pipeline", metavar="MOD:CLASS",
                    help="pipeline class, constructed as CLASS(seed=SEED) (for I/O benchmarks/tests)")
    ap.add_argument("--no-prepare", action="store_true",
                    help="do not touch the interfaces (link up, offloads, IPv6)")
    args = ap.parse_args(argv)
    numbers = [n for n, _ in args.port]
    if len(set(numbers)) != len(numbers):
        ap.error(f"duplicate port numbers in {numbers}")
    return args


def make_logger(name: str, path: str | None) -> logging.Logger:
    log = logging.getLogger(f"softswitch.{name}")
    log.setLevel(logging.INFO)
    log.propagate = False
    handler = logging.FileHandler(path) if path else logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(f"%(asctime)s {name} %(levelname)s %(message)s"))
    log.addHandler(handler)
    return log


def load_pipeline(spec: str, seed: int | None):
    module, _, cls = spec.partition(":")
    return getattr(importlib.import_module(module), cls or "Pipeline")(seed=seed)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    set_timer_slack()               # its timed waits end on time on any machine (ground/timerslack.py)
    log = make_logger(args.name, args.log)
    try:
        pipeline = load_pipeline(args.pipeline, args.seed)
    except Exception:
        log.exception("cannot create pipeline %s", args.pipeline)
        return 1
    daemon = Daemon(args.name, dict(args.port), args.control, pipeline, log=log,
                    pcap_dir=args.pcap_dir, pidfile=args.pidfile, batch=args.batch,
                    stats_interval=args.stats_interval, prepare_ports=not args.no_prepare,
                    coalesce=args.coalesce)
    return daemon.run()


if __name__ == "__main__":
    sys.exit(main())
