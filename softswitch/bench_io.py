"""`python -m agglab.softswitch.bench_io`: packets/s through the real switch daemon on veths.

Set-up: N worker namespaces (default 8), each wired to one port of one
`python -m agglab.softswitch` process.  Every worker runs a sender process in its
namespace that keeps a window of aggregation slots in flight (SwitchML
style: a slot's next packet goes out when its result arrives), transmitting
with an AF_PACKET socket and receiving results on a UDP socket.  A closed
loop rather than an open-loop blast, because a blast only measures how many
frames the kernel throws away; with a window the daemon is kept saturated and
every packet it handles counts.  Lost packets are resent after a timeout.

Two runs by default:
  * `reflect`: a trivial pipeline that bounces each frame back to its
    sender: the ceiling of the daemon's I/O loop alone;
  * `agg`: the real P4 pipeline aggregating N workers: the figure that
    matters for emulations (completions/s x N frames in and out).
Everything (namespaces, veths, processes) is removed at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import select
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from agglab.ground import wire
from agglab.ground.mmsg import MsgBatch
from agglab.softswitch.control import wait_ready
from agglab.softswitch.io import SO_RCVBUFFORCE
from agglab.softswitch.scratchnet import Host, ScratchNet, agg_frame, program_aggregation


class Reflect:
    """I/O-ceiling pipeline: return every frame to its ingress port with MACs and IPs swapped.

    Swapping the two IPv4 addresses leaves the header checksum valid and the
    UDP checksum is 0, so the sender's UDP socket accepts the echo."""

    def __init__(self, seed=None):
        pass

    def process(self, port: int, frame: bytes):
        return [(port, frame[6:12] + frame[0:6] + frame[12:26] + frame[30:34] + frame[26:30]
                 + frame[34:])]

    def command(self, line: str) -> str:
        raise ValueError("the reflector pipeline has no tables")


def sender(a: argparse.Namespace) -> dict:
    """One worker: keep `window` slots in flight until the measurement ends; runs in a netns."""
    h = Host(f"h{a.rank}", "", a.ip, a.mac, 0, "")
    if a.sender_sched == "batch":
        # A load generator must not preempt the switch it measures: with the senders and the
        # daemon sharing a few CPUs, every result burst the daemon sends wakes a sender, and a
        # woken SCHED_OTHER task preempts the daemon inside its sendmmsg; SCHED_BATCH tasks
        # get the same CPU share but never preempt on wake-up.
        os.sched_setscheduler(0, os.SCHED_BATCH, os.sched_param(0))
    values = [a.rank + 1] * wire.K
    frames = [[agg_frame(h, values, job=a.job, ver=v, slot=s, worker=a.rank, block=s,
                         exp=wire.EXP_BIAS) for s in range(a.window)] for v in (0, 1)]
    raw = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)   # protocol 0: transmit only
    raw.bind((a.ifname, 0))
    send = raw.send
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    udp.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, 8 << 20)
    udp.bind((a.ip, wire.UDP_PORT))                   # also stops ICMP port-unreachable replies
    udp.setblocking(False)
    # results arrive a batch per recvmmsg, the next packets leave a batch per sendmmsg, and
    # a batch is handled with a few numpy calls, not a Python loop per result: the senders
    # share the machine's CPUs with the daemon, so their cost is part of what caps the figure
    rx, tx = MsgBatch(256, 2048), MsgBatch(256, 2048, fd=raw.fileno())
    rx_fd = udp.fileno()
    table = np.array([[np.frombuffer(f, np.uint8) for f in frames[v]] for v in (0, 1)])
    length = table.shape[2]
    poller = select.poll()
    poller.register(udp, select.POLLIN)
    cur, sent_at = np.zeros(a.window, np.int64), np.zeros(a.window)
    t_measure, t_end = a.start_at + a.warmup, a.start_at + a.warmup + a.seconds
    time.sleep(max(0.0, a.start_at - time.time()))
    now = time.time()
    for s in range(a.window):
        send(frames[0][s])
        sent_at[s] = now
    results = bad = retx = 0
    next_scan = now + a.rto
    while now < t_end:
        poller.poll(50)
        now = time.time()
        n = rx.recv(rx_fd)
        staged = 0
        if n:
            rows = rx.rows[:n]
            word = (rows[:, 4].astype(np.int64) << 8) | rows[:, 5]
            slot, ver = word & 0x7FFF, word >> 15
            ok = (rx.received[:n] >= 20) & (rows[:, 0] == a.job) & (slot < a.window)
            ok[ok] = ver[ok] == cur[slot[ok]]             # else a duplicate of a result we had
            pick = np.flatnonzero(ok)
            if len(pick):
                _, first = np.unique(slot[pick], return_index=True)   # a slot twice: the first
                pick = pick[np.sort(first)]
                got = rows[pick, 16:20].view(">i4")[:, 0]
                bad += int((got != a.expect).sum())
                s, v = slot[pick], ver[pick] ^ 1
                cur[s] = v
                staged = len(pick)
                tx.rows[:staged, :length] = table[v, s]
                tx.lengths[:staged] = length
                sent_at[s] = now
                if now >= t_measure:
                    results += staged
        done = 0
        while done < staged:                              # a refused frame is resent on timeout
            done += tx.send(tx.fd, staged, done) or 1
        if now >= next_scan:                              # per-slot retransmission timer
            next_scan = now + a.rto / 4
            for s in np.flatnonzero(now - sent_at > a.rto).tolist():
                send(frames[cur[s]][s])
                sent_at[s] = now
                retx += 1
    return {"rank": a.rank, "results": results, "bad": bad, "retx": retx}


def _cpu_seconds(pid: int) -> tuple[float, float]:
    """(user, system) CPU seconds of a process so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tick, int(fields[12]) / tick


def soft_switch(net: ScratchNet, wd: Path, mode: str):
    """Start the software switch daemon on the scratch network's ports: (process, control client, port_stats)."""
    extra = ["--stats-interval", "3600"] + (["--pipeline", "agglab.softswitch.bench_io:Reflect"]
                                           if mode == "reflect" else [])
    proc, paths = net.start_switch(wd, *extra)
    client = wait_ready(paths["control"], 20, log=paths["log"], process=proc)
    return proc, client, client.port_stats


def run(mode: str, a: argparse.Namespace, start_switch=soft_switch) -> dict:
    """One measurement with a fresh scratch network; returns the figures. `start_switch(net, workdir, mode)`
    starts the data plane under test (default: this daemon) and returns (process, a client that
    takes simple_switch_CLI lines, a port-counter function or None)."""
    with ScratchNet() as net, tempfile.TemporaryDirectory(prefix="agglab-bench-") as wd:
        hosts = [net.add_host(i) for i in range(1, a.workers + 1)]
        proc, client, port_stats = start_switch(net, Path(wd), mode)
        if mode == "agg":
            program_aggregation(client, hosts, job=a.job)
        expect = {"agg": a.workers * (a.workers + 1) // 2}
        start_at = time.time() + 1.5 + 0.1 * a.workers
        senders = []
        for i, h in enumerate(hosts):
            argv = [sys.executable, "-m", "agglab.softswitch.bench_io", "--sender", "--rank", str(i),
                    "--ip", h.ip, "--mac", h.mac, "--ifname", h.ifname, "--job", str(a.job),
                    "--window", str(a.window), "--start-at", repr(start_at),
                    "--warmup", str(a.warmup), "--seconds", str(a.seconds),
                    "--expect", str(expect.get(mode, i + 1)), "--sender-sched", a.sender_sched]
            senders.append(net.spawn(argv, ns=h.ns, stdout=subprocess.PIPE, text=True))
        time.sleep(max(0.0, start_at + a.warmup - time.time()))
        stats = port_stats or (lambda: {})
        s0, c0, t0 = stats(), _cpu_seconds(proc.pid), time.monotonic()
        time.sleep(a.seconds)
        s1, c1, t1 = stats(), _cpu_seconds(proc.pid), time.monotonic()
        outs = []
        for p in senders:
            out, _ = p.communicate(timeout=30 + a.seconds)
            if p.returncode != 0:
                raise RuntimeError(f"sender exited {p.returncode}; see output above")
            outs.append(json.loads(out))
        dt = t1 - t0

        def rate(key: str) -> float:
            return sum(s1[p][key] - s0[p][key] for p in s0 if p.isdigit()) / dt
        results_per_s = sum(o["results"] for o in outs) / len(outs) / a.seconds
        return {"mode": mode, "rx_pps": rate("rx"), "tx_pps": rate("tx"),
                "drops_in_switch": sum(s1[p]["drop"] for p in s1 if p.isdigit()),
                "results_per_s": results_per_s,
                # every completion takes one frame from each worker and multicasts one to each
                "completion_frames_pps": results_per_s * a.workers,
                "bad": sum(o["bad"] for o in outs), "retx": sum(o["retx"] for o in outs),
                "daemon_cpu": (sum(c1) - sum(c0)) / dt, "daemon_sys": (c1[1] - c0[1]) / dt}


def add_load_options(ap: argparse.ArgumentParser, window: int) -> None:
    """The load's shape, shared with agglab.bench.bmv2 so both switches see the same packets."""
    ap.add_argument("--workers", type=int, default=8)
    ap.add_argument("--window", type=int, default=window, help="slots in flight per worker")
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--warmup", type=float, default=1.0)
    ap.add_argument("--job", type=int, default=1)
    ap.add_argument("--rto", type=float, default=0.5, help="sender retransmission timeout (s)")
    ap.add_argument("--sender-sched", choices=["batch", "normal"], default="batch",
                    help="senders' scheduling policy: SCHED_BATCH (default: a woken sender does not "
                         "preempt the switch under test) or SCHED_OTHER")


def options(argv: list[str] | None = None) -> argparse.Namespace:
    """The benchmark's settings (defaults, or parsed from `argv`); `run(mode, options())`."""
    ap = argparse.ArgumentParser(prog="python -m agglab.softswitch.bench_io", description=__doc__.splitlines()[0])
    add_load_options(ap, window=128)
    ap.add_argument("--mode", choices=["both", "reflect", "agg"], default="both")
    for name in ("--sender",):
        ap.add_argument(name, action="store_true", help=argparse.SUPPRESS)
    for name, typ in (("--rank", int), ("--ip", str), ("--mac", str), ("--ifname", str),
                      ("--start-at", float), ("--expect", int)):
        ap.add_argument(name, type=typ, help=argparse.SUPPRESS)
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    a = options(argv)
    if a.sender:
        print(json.dumps(sender(a)), flush=True)
        return 0
    if os.geteuid() != 0:
        print("bench_io needs root (network namespaces, raw sockets)", file=sys.stderr)
        return 2
    modes = ["reflect", "agg"] if a.mode == "both" else [a.mode]
    for mode in modes:
        r = run(mode, a)
        what = ("I/O ceiling, frames reflected" if mode == "reflect"
                else f"P4 pipeline, {a.workers}-way aggregation")
        print(f"softswitch daemon [{what}]: {r['rx_pps']:,.0f} frames/s in, "
              f"{r['tx_pps']:,.0f} frames/s out, {r['results_per_s']:,.0f} results/s per worker "
              f"(daemon CPU {r['daemon_cpu']:.0%} of which kernel {r['daemon_sys']:.0%}, i.e. "
              f"{r['rx_pps'] / max(r['daemon_cpu'], 1e-9):,.0f} frames in per CPU-second; "
              f"window {a.window} x {a.workers} workers, senders {a.sender_sched}-scheduled, "
              f"retransmissions {r['retx']}, wrong results {r['bad']})", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
