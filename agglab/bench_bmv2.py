"""`python -m agglab.bench_bmv2`: the aggregation pipeline's frames/s on BMv2 beside the
software switch's: same lab (N worker namespaces on one switch), same closed-loop senders,
same packets, same P4 program (p4src/agglab.p4 compiled for BMv2; the software switch runs its
Python twin). Run by `make bench` when simple_switch and p4c are present.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from controller.bmv2_client import Bmv2Client
from controller.bmv2_tools import find_bmv2_tool
from softswitch import bench_io

THRIFT_PORT = 29611


def bmv2_switch(lab, wd: Path, mode: str):
    """simple_switch on the lab's ports running the compiled agglab.p4 (per-packet logging off)."""
    from emulation.p4build import compile_p4
    from softswitch.netlab import sh

    for h in lab.hosts:          # libpcap only opens interfaces that are up; no IPv6 chatter
        sh("sysctl", "-qw", f"net.ipv6.conf.{h.switch_if}.disable_ipv6=1", check=False)
        sh("ip", "link", "set", h.switch_if, "up")
    argv = [find_bmv2_tool("simple_switch"), "--device-id", "61", "--thrift-port", str(THRIFT_PORT),
            "--notifications-addr", f"ipc://{wd}/notify.ipc", "--log-level", "warn",
            "--log-file", str(wd / "simple_switch")]
    for h in lab.hosts:
        argv += ["-i", f"{h.port}@{h.switch_if}"]
    proc = lab.spawn(argv + [str(compile_p4())])
    return proc, Bmv2Client("bench", THRIFT_PORT, timeout=20), None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m agglab.bench_bmv2", description=__doc__.splitlines()[0])
    bench_io.add_load_options(ap, window=32)
    a = ap.parse_args(argv)
    if os.geteuid() != 0:
        print("bench_bmv2 needs root (network namespaces, raw sockets)", file=sys.stderr)
        return 2
    if not (find_bmv2_tool("simple_switch") and find_bmv2_tool("p4c")):
        print("bench_bmv2: simple_switch or p4c not found (sudo scripts/provision-vm.sh)", file=sys.stderr)
        return 2
    for name, start in (("software switch", bench_io.soft_switch), ("BMv2 simple_switch", bmv2_switch)):
        r = bench_io.run("agg", a, start_switch=start)
        print(f"{name:18s} [{a.workers}-way aggregation, window {a.window}]: "
              f"{r['completion_frames_pps']:,.0f} frames/s in (and out), "
              f"{r['results_per_s']:,.0f} results/s per worker, switch CPU {r['daemon_cpu']:.0%}, "
              f"retransmissions {r['retx']}, wrong results {r['bad']}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
