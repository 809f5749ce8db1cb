"""`make bench ONLY=bmv2` (and `python -m agglab.bench.bmv2`): the aggregation pipeline's
frames/s per BMv2 switch, for each simple_switch build, beside the software twin's.

Workload: N worker namespaces (default 8) on one switch, each keeping a window of dense
aggregation slots in flight (a slot's next frame goes out when its result arrives), so the
switch runs as fast as it accepts frames; same senders, packets and program for every switch
(p4src/agglab.p4 compiled for BMv2; the twin runs its Python pipeline). frames/s = completed
aggregations/s x N: each completion takes one frame from every worker and multicasts one back.

Builds: `reference`, the simple_switch agglab runs by default (controller/bmv2_tools.py: the
p4kit's -O2 build with logging macros), and `performance`, BMv2's docs/performance.md build
(-O3, --disable-logging-macros, --disable-elogger) that scripts/build-bmv2.sh --perf
--switch-only puts in /opt/bmv2-perf. Why both: a BMv2 emulation is faithful only below the rate
its switches keep up with, and the build sets that rate; a build that is not installed is
reported with the command that builds it. Every switch runs at log level warn to a file.

Ceiling: the per-link rate at which N workers' wire time equals the switch's frame rate,
frames/s / N x FRAME_BYTES x 8 (a faithful run needs links below it); where `agglab calibrate`
has measured the twin's ceiling, the BMv2 builds' follow by their frames/s ratio to the twin.
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
from pathlib import Path

from agglab.bench.figures import NO_BMV2, SectionSkipped, figure
from agglab.controller.bmv2_client import Bmv2Client
from agglab.controller.bmv2_tools import BUILD_PERF, PERF_SWITCH, find_bmv2_tool, installed_tool, is_program
from agglab.emulation.fidelity import load_calibration
from agglab.emulation.p4build import compile_p4
from agglab.ground import wire
from agglab.softswitch import bench_io
from agglab.softswitch.scratchnet import sh

THRIFT_PORT = 29611


def bmv2_switch(lab, wd: Path, mode: str, binary: str | None = None):
    """simple_switch (`binary`, default the one agglab runs) on the lab's ports running the
    compiled agglab.p4 (per-packet logging off)."""
    for h in lab.hosts:          # libpcap only opens interfaces that are up; no IPv6 chatter
        sh("sysctl", "-qw", f"net.ipv6.conf.{h.switch_if}.disable_ipv6=1", check=False)
        sh("ip", "link", "set", h.switch_if, "up")
    argv = [binary or find_bmv2_tool("simple_switch"), "--device-id", "61", "--thrift-port", str(THRIFT_PORT),
            "--notifications-addr", f"ipc://{wd}/notify.ipc", "--log-level", "warn",
            "--log-file", str(wd / "simple_switch")]
    for h in lab.hosts:
        argv += ["-i", f"{h.port}@{h.switch_if}"]
    proc = lab.spawn(argv + [str(compile_p4())])
    return proc, Bmv2Client("bench", THRIFT_PORT, timeout=20), None


def builds() -> list[tuple[str, str | None, str]]:
    """(name, simple_switch or None when not installed, how to build it) per build."""
    reference = installed_tool("simple_switch")
    perf = PERF_SWITCH if is_program(PERF_SWITCH) else None
    return [("reference", reference, "sudo scripts/provision-vm.sh (or the p4kit's install.sh)"),
            ("performance", perf, BUILD_PERF)]


def ceiling_mbps(frames_per_s: float, workers: int) -> float:
    """The per-link rate whose wire time matches the switch: every completion puts one
    FRAME_BYTES frame on each worker's link each way."""
    return frames_per_s / workers * wire.FRAME_BYTES * 8 / 1e6


def twin_calibrated_ceiling() -> float | None:
    """`agglab calibrate`'s ceiling for the software switch on this machine, if measured."""
    return (load_calibration() or {}).get("ceiling_mbps")


def measure(opts: argparse.Namespace, log=print) -> list[dict]:
    """The twin, then each installed build: one record each (name, binary, the bench_io result,
    ratio to the twin, ceilings); a missing build is a record with result None."""
    twin = bench_io.run("agg", opts, start_switch=bench_io.soft_switch)
    twin_fps = twin["completion_frames_pps"]
    calibrated = twin_calibrated_ceiling()
    rows = [{"name": "software twin", "binary": None, "result": twin, "ratio": 1.0,
             "ceiling_mbps": ceiling_mbps(twin_fps, opts.workers), "calibrated_mbps": calibrated}]
    log(_line(rows[0], opts))
    for name, binary, how in builds():
        if binary is None:
            rows.append({"name": f"BMv2 {name} build", "binary": None, "result": None, "build_with": how})
            log(f"BMv2 {name} build: not installed, not measured; build it with: {how}")
            continue
        r = bench_io.run("agg", opts, start_switch=functools.partial(bmv2_switch, binary=binary))
        ratio = r["completion_frames_pps"] / twin_fps if twin_fps else float("nan")
        rows.append({"name": f"BMv2 {name} build", "binary": binary, "result": r, "ratio": ratio,
                     "ceiling_mbps": ceiling_mbps(r["completion_frames_pps"], opts.workers),
                     "calibrated_mbps": calibrated * ratio if calibrated else None})
        log(_line(rows[-1], opts))
    return rows


def _line(row: dict, opts) -> str:
    r = row["result"]
    calibrated = (f", calibrated ceiling {row['calibrated_mbps']:.2f} Mb/s"
                  + (" (the twin's scaled)" if row["binary"] else "")) if row["calibrated_mbps"] else ""
    return (f"{row['name']}{' ' + row['binary'] if row['binary'] else ''} [{opts.workers}-way aggregation, "
            f"window {opts.window}]: {r['completion_frames_pps']:,.0f} frames/s, {row['ratio']:.3f}x the twin; "
            f"switch CPU {r['daemon_cpu']:.0%}, retransmissions {r['retx']}, wrong results {r['bad']}; "
            f"ceiling {row['ceiling_mbps']:.2f} Mb/s per link{calibrated}")


def bench_bmv2(a) -> list[dict]:
    """`make bench`'s `bmv2` section: the figures of measure()."""
    if not (installed_tool("simple_switch") and find_bmv2_tool("p4c")):
        raise SectionSkipped(NO_BMV2)
    opts = bench_io.options(["--seconds", str(a.daemon_seconds), "--window", "32"])
    rows = measure(opts, log=lambda line: None)
    missing = [f"{row['name']}: not installed ({row['build_with']})" for row in rows if row["result"] is None]
    for line in missing:                        # one line each, before the figures are printed
        print(line, flush=True)
    out = []
    for row in rows:
        r = row["result"]
        if r is None:
            continue
        out.append(figure(f"{row['name']} aggregation frames/s (window {opts.window})", r["completion_frames_pps"],
                          "frames/s", link_mbps=None, link_bound=False,
                          scale=f"{opts.workers} workers x window {opts.window} on unshaped veths, one switch",
                          detail=f"{row['ratio']:.3f}x the twin, ceiling {row['ceiling_mbps']:.2f} Mb/s per link"
                                 + (f" (calibrated {row['calibrated_mbps']:.2f})" if row["calibrated_mbps"] else "")
                                 + f"; switch CPU {r['daemon_cpu']:.0%}, retransmissions {r['retx']}, "
                                   f"wrong results {r['bad']}" + (f"; {row['binary']}" if row["binary"] else ""),
                          simple_switch=row["binary"], ratio_to_twin=round(row["ratio"], 4),
                          ceiling_mbps=round(row["ceiling_mbps"], 3),
                          calibrated_ceiling_mbps=round(row["calibrated_mbps"], 3) if row["calibrated_mbps"] else None,
                          switch_cpu=round(r["daemon_cpu"], 3), retransmissions=r["retx"], wrong_results=r["bad"],
                          not_installed=missing))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m agglab.bench.bmv2", description=__doc__.splitlines()[0])
    bench_io.add_load_options(ap, window=32)
    a = ap.parse_args(argv)
    if os.geteuid() != 0:
        print("agglab.bench.bmv2 needs root (network namespaces, raw sockets)", file=sys.stderr)
        return 2
    if not (installed_tool("simple_switch") and find_bmv2_tool("p4c")):
        print("agglab.bench.bmv2: simple_switch or p4c not found (sudo scripts/provision-vm.sh)", file=sys.stderr)
        return 2
    measure(a)
    return 0


if __name__ == "__main__":
    sys.exit(main())
