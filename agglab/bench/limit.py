"""`make bench ONLY=limit`: CPU per frame of agglab's data path beside the kernel's, on one chain.

The same dense aggregation frames (wire.FRAME_BYTES, the size the emulator sends) cross the
same chain of shaped veths (agglab/bench/limit_chain.py: sender, forwarder and receiver
namespaces, the emulator's htb on every end) three ways:

  kernel  a Linux bridge forwards them. Why a bridge and not a forwarder in C over raw sockets:
          a raw-socket forwarder is a process with a wake-up and two system calls per batch,
          i.e. the same shape as the software switch with the Python taken out; the bridge is
          what the kernel itself spends to move a frame from one veth through htb to another,
          the floor the issue names. Counted: its ingress NAPI thread, which receives the frame,
          bridges it, sends it through htb and delivers it to the receiver's socket.
  switch  agglab's software switch (`python -m agglab.softswitch`, the emulator's arguments) aggregates
          them: one child per job (fan-in 1), so every frame completes a slot and its result is
          multicast to the receiver: a frame in, a frame out, as through the bridge. Counted:
          the switch process (its system calls include sending through htb and delivery to the
          receiver's socket) and its ingress NAPI thread (receive, AF_PACKET queue, wake-up).
  agent   agglab's host agent (hosts/agent.py `allreduce` over its UDP transport, one worker)
          runs an allreduce through the switch and back. Counted: the agent process during the
          call and the NAPI thread of its own veth end (the results' delivery to its socket),
          per frame it sent or received.

Each at two rates:
  high  batches full: the load keeps HIGH_WINDOW frames in flight and sends them BATCH at a time
        (the agent: its default window on links no run here fills);
  low   a frame per wake-up: one frame in flight, the next sent when the last arrived (the
        agent: window 1, each wake-up takes one result and sends one frame). `--limit-gap-ms`
        puts a pause between them for the kernel and the switch (the agent has no such knob):
        measured on a 2-core VM, a 1 ms pause made every path several times dearer per frame
        (a CPU woken from idle, cold caches) and left the ratios about where they were, so the
        default is none and all three paths run the same back-to-back regime.

CPU is read from each process's and thread's CPU-time clock (nanoseconds, limit_chain.cpu_ns);
the load generator (this process, its sockets made in the sender's and receiver's namespaces)
is not counted. Every figure is also given as a ratio to the kernel's at the same rate: the
figure the fast data path drives down.
"""

from __future__ import annotations

import argparse
import json
import re
import select
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from agglab.bench.figures import figure
from agglab.bench.limit_chain import Chain, agg_frame_to, cpu_ns
from agglab.ground import wire
from agglab.ground.addresses import SERVICE_IP, SERVICE_MAC
from agglab.ground.mmsg import MsgBatch
from agglab.softswitch.io import SO_RCVBUFFORCE
from agglab.softswitch.control import wait_ready
from agglab.softswitch.roles import job_entry
from agglab.hosts.agent import UdpTransport, allreduce

HIGH_WINDOW = 256         # frames in flight at the high rate
BATCH = 64                # frames per sendmmsg at the high rate (the switch's --batch default)
WARMUP = 1.0              # seconds before the measured window
STALL = 0.5               # seconds with frames in flight and none arriving: they are lost
SWITCH_JOB, AGENT_JOB = 1, 2
RATES = {"high": "high rate (batches full)", "low": "low rate (a frame per wake-up)"}


def bench_limit(a) -> list[dict]:
    """The section: the kernel, then the switch and the agent, at both rates; figures with ratios."""
    rows = {}
    with Chain() as chain:
        chain.bridge()
        napi = chain.napi_threads()
        frames = [agg_frame_to(chain.snd_ip, chain.snd_mac, chain.rcv_ip, chain.rcv_mac, [1] * wire.K,
                               job=SWITCH_JOB, ver=v, slot=s, worker=0, block=s, exp=wire.EXP_BIAS)
                  for v in (0, 1) for s in range(HIGH_WINDOW)]
        for rate in RATES:
            rows["kernel", rate] = drive(chain, frames, rate, a, {"NAPI thread": lambda: _sum_cpu(napi["a"])})
    with Chain() as chain, tempfile.TemporaryDirectory(prefix="agglab-limit-") as wd:
        napi = chain.napi_threads()
        frames = [agg_frame_to(chain.snd_ip, chain.snd_mac, SERVICE_IP, SERVICE_MAC, [1] * wire.K,
                               job=SWITCH_JOB, ver=v, slot=s, worker=0, block=s, exp=wire.EXP_BIAS)
                  for v in (0, 1) for s in range(HIGH_WINDOW)]
        for rate in RATES:               # a fresh switch per run: its slots start at version 0
            proc = start_switch(chain, Path(wd), rate, SWITCH_JOB, 2, chain.rcv_mac, chain.rcv_ip)
            rows["switch", rate] = drive(chain, frames, rate, a, {
                "switch process": lambda: cpu_ns(proc.pid), "NAPI thread": lambda: _sum_cpu(napi["a"])})
            _stop(proc)
        for rate in RATES:
            proc = start_switch(chain, Path(wd), "agent-" + rate, AGENT_JOB, 1, chain.snd_mac, chain.snd_ip)
            rows["agent", rate] = agent_run(chain, rate, a, napi["s"])
            _stop(proc)
    return figures(rows, a)


def _sum_cpu(pids: list[int]) -> int:
    return sum(cpu_ns(p) for p in pids)


def _stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def start_switch(chain: Chain, wd: Path, name: str, job: int, out_port: int, out_mac: str, out_ip: str):
    """The software switch on the chain's middle namespace, started with the emulator's
    arguments (emulation/switch_nodes.py), one job aggregating port 1 alone (fan-in 1) whose
    results go out of `out_port` to (out_mac, out_ip)."""
    control, log = wd / f"{name}.sock", wd / f"{name}.log"
    argv = [sys.executable, "-m", "agglab.softswitch", "--name", "s1", "--control", str(control), "--log", str(log),
            "--seed", "0", "--no-prepare", "--port", f"1={chain.ifs['a']}", "--port", f"2={chain.ifs['b']}"]
    with open(wd / f"{name}.out", "ab") as out:
        proc = chain.spawn("mid", argv, stdout=out, stderr=subprocess.STDOUT)
    client = wait_ready(control, 30, log=log, process=proc)
    group = 1 + job
    client.command(job_entry(job, 0, 0, 1, child=0, fan_in=1, mgrp=group).command())
    client.command(f"table_add agg_reply agg_set_dst {out_port} => {SERVICE_MAC} {SERVICE_IP} {out_mac} {out_ip}")
    client.command(f"mc_mgrp_create {group}")
    handle = re.search(r"handle (\d+)", client.command(f"mc_node_create 0 {out_port}"))
    if not handle:
        raise RuntimeError("the switch gave no multicast node handle")
    client.command(f"mc_node_associate {group} {handle.group(1)}")
    return proc


def drive(chain: Chain, frames: list[bytes], rate: str, a, clocks: dict) -> dict:
    """Send `frames` (cyclically) from the sender's namespace and receive them in the
    receiver's for WARMUP + a.limit_seconds; returns the frames received and each clock's CPU
    nanoseconds over the measured window (the last a.limit_seconds)."""
    tx_sock = chain.socket_in("snd", socket.AF_PACKET, socket.SOCK_RAW)    # protocol 0: transmit only
    rx_sock = chain.socket_in("rcv", socket.AF_INET, socket.SOCK_DGRAM)
    with tx_sock, rx_sock:
        tx_sock.bind((chain.ifs["s"], 0))
        rx_sock.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, 8 << 20)
        rx_sock.bind((chain.rcv_ip, wire.UDP_PORT))
        rx_sock.setblocking(False)
        tx, rx = MsgBatch(len(frames), 2048, fd=tx_sock.fileno()), MsgBatch(HIGH_WINDOW, 2048)
        for i, f in enumerate(frames):
            tx.put(i, f)
        poller = select.poll()
        poller.register(rx_sock, select.POLLIN)
        window, batch, gap = (HIGH_WINDOW, BATCH, 0.0) if rate == "high" else (1, 1, a.limit_gap_ms / 1e3)
        pos = inflight = received = lost = 0
        start = time.monotonic()
        t_measure, t_end = start + WARMUP, start + WARMUP + a.limit_seconds
        base = None
        next_send = last_rx = start
        while (now := time.monotonic()) < t_end:
            if base is None and now >= t_measure:
                base = (received, {k: clock() for k, clock in clocks.items()}, now)
            if inflight < window and now >= next_send:
                sent = tx.send(tx.fd, pos + min(window - inflight, batch, len(frames) - pos), pos)
                pos, inflight = (pos + sent) % len(frames), inflight + sent
                if inflight == sent:
                    last_rx = now                     # the stall timer starts at the first frame
            if inflight + batch > window or now < next_send:   # nothing more to send now: wait
                wait = STALL if inflight else next_send - now
                poller.poll(max(1, int(wait * 1000)))
            n = rx.recv(rx_sock.fileno())
            if n:
                received, inflight, last_rx = received + n, max(0, inflight - n), time.monotonic()
                next_send = last_rx + gap if inflight == 0 else next_send
            elif inflight and time.monotonic() - last_rx > STALL:
                lost, inflight = lost + inflight, 0
        end = (received, {k: clock() for k, clock in clocks.items()}, time.monotonic())
    frames_in = end[0] - base[0]
    if frames_in <= 0:
        raise RuntimeError(f"{rate} rate: no frame crossed the chain in {a.limit_seconds} s ({lost} lost)")
    return {"frames": frames_in, "seconds": end[2] - base[2], "lost": lost,
            "cpu_ns": {k: end[1][k] - base[1][k] for k in clocks}}


def agent_run(chain: Chain, rate: str, a, napi_pids: list[int]) -> dict:
    """One allreduce by a real agent in the sender's namespace through the switch (window 1 at
    the low rate, the default window at the high rate); its CPU from inside the process."""
    window = "1" if rate == "low" else "0"
    before = _sum_cpu(napi_pids)
    proc = chain.spawn("snd", [sys.executable, "-m", "agglab.bench.limit", "--agent", "--ip", chain.snd_ip,
                               "--elements", str(a.limit_elements), "--window", window, "--job", str(AGENT_JOB)],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = proc.communicate(timeout=600)
    napi = _sum_cpu(napi_pids) - before
    if proc.returncode != 0:
        raise RuntimeError(f"the {rate}-rate agent exited {proc.returncode}: {err.strip()[-300:]}")
    r = json.loads(out)
    if not r["exact"]:
        raise RuntimeError(f"the {rate}-rate agent's allreduce was not exact")
    return {"frames": r["sent"] + r["received"], "seconds": r["seconds"], "lost": r["retransmissions"],
            "cpu_ns": {"agent process": r["cpu_ns"], "NAPI thread": napi},
            "per_batch": r["received"] / max(1, r["batches"]), "window": r["window"]}


WHAT = {"kernel": "kernel (Linux bridge)", "switch": "software switch", "agent": "agent"}
COUNTED = {"kernel": "the bridge's ingress NAPI thread",
           "switch": "the switch process + its ingress NAPI thread",
           "agent": "the agent process + its veth's NAPI thread, per frame sent or received"}


def figures(rows: dict, a) -> list[dict]:
    out = []
    for rate, rate_text in RATES.items():
        kernel_us = _us(rows["kernel", rate])
        for path in WHAT:
            r = rows[path, rate]
            us = _us(r)
            ratio = round(us / kernel_us, 3)      # printed and recorded alike
            parts = ", ".join(f"{k} {v / r['frames'] / 1e3:.2f}" for k, v in r["cpu_ns"].items())
            extra = (f", {r['per_batch']:.1f} results per receive batch, window {r['window']}"
                     if path == "agent" else "")
            out.append(figure(
                f"{WHAT[path]} CPU per frame, {rate_text}", us, "µs/frame", link_mbps=None, link_bound=False,
                links="veth + htb chain (htb at 10 Gb/s: it never holds a frame back)",
                scale=f"{r['frames']:,} frames of {wire.FRAME_BYTES} bytes, {r['frames'] / r['seconds']:,.0f}/s",
                detail=f"{ratio:.1f}x the kernel's; CPU counted: {COUNTED[path]} ({parts} µs){extra}; "
                       f"lost {r['lost']}",
                path=path, rate=rate, ratio_to_kernel=ratio, frames=r["frames"],
                lost=r["lost"], results_per_batch=round(r["per_batch"], 2) if path == "agent" else None,
                cpu_us_per_frame_parts={k: round(v / r["frames"] / 1e3, 3)
                                                       for k, v in r["cpu_ns"].items()}))
    return out


def _us(r: dict) -> float:
    return sum(r["cpu_ns"].values()) / r["frames"] / 1e3


def agent_main(argv: list[str]) -> int:
    """The agent of `agent_run`, inside the sender's namespace: one allreduce of 0..n-1 (int32,
    one worker: the result is the input), its CPU and counts as one JSON line."""
    ap = argparse.ArgumentParser(prog="python -m agglab.bench.limit --agent")
    ap.add_argument("--agent", action="store_true")
    ap.add_argument("--ip", required=True)
    ap.add_argument("--elements", type=int, required=True)
    ap.add_argument("--window", type=int, default=0, help="0: the agents' default")
    ap.add_argument("--job", type=int, default=AGENT_JOB)
    o = ap.parse_args(argv)
    arr = np.arange(o.elements, dtype=np.int32)
    with UdpTransport(o.ip, SERVICE_IP) as transport:
        c0, t0 = time.process_time_ns(), time.monotonic()
        got, st = allreduce(arr, transport=transport, rank=0, workers=1, job=o.job, window=o.window or None,
                            return_stats=True)
        c1, t1 = time.process_time_ns(), time.monotonic()
    print(json.dumps({"cpu_ns": c1 - c0, "seconds": t1 - t0, "sent": st.packets_sent,
                      "received": st.results_accepted + st.duplicates_ignored + st.foreign_ignored,
                      "retransmissions": st.retransmissions, "batches": st.batches, "window": st.slots,
                      "exact": bool(np.array_equal(got, arr))}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(agent_main(sys.argv[1:]))
