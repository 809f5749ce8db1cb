"""Entry point of one worker process inside a Mininet host namespace.

Generates its gradient from (rank, seed), runs the allreduce through the switch and
writes the result (.npy) and its statistics (.json) for the checker in emulation/session.py.
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

from ground.priority import as_batch_work
from ground.timerslack import set_timer_slack
from ground.progress import ProgressFile
from ground.runspec import RunPlan, WorkerSeat
from ground.start_gate import wait_to_start
from hosts import ps, ring
from hosts.gradients import gradient_for
from hosts.tcp_mesh import BASE_PORT


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="agglab worker (runs inside a host namespace): reads the "
                                 "run plan the session wrote and runs one rank of its allreduce")
    ap.add_argument("plan", help="run.json written by the session (ground/runspec.py RunPlan)")
    ap.add_argument("rank", type=int)
    args = ap.parse_args(argv)
    as_batch_work()                 # a woken worker never preempts a switch (ground/priority.py)
    set_timer_slack()               # its pacer wakes on time on any machine (ground/timerslack.py)
    plan = RunPlan.read(args.plan)
    return run_seat(plan, plan.seats[args.rank])


def run_seat(plan: RunPlan, seat: WorkerSeat) -> int:
    """Run one rank; write <out>.npy and <out>.json (ok, error or stats) for the session.

    Everything a rank needs before its first packet (its input, imports, sockets) is done
    before the start gate (ground/start_gate.py), so the time measured is the allreduce's."""
    spec = plan.spec
    report: dict = {"rank": seat.rank, "ok": False}
    try:
        data = gradient_for(spec, seat.rank)
        prepare = _prepare_bml if seat.bml_plan else RUNNERS[spec.algorithm]
        go = prepare(plan, seat, data)
        report["gate_wait_s"] = round(wait_to_start(spec.give_up * 3), 4)
        started, cpu = time.monotonic(), os.times()
        if os.environ.get("AGGLAB_PROFILE"):
            import cProfile
            prof = cProfile.Profile(time.process_time)
            result, stats = prof.runcall(go)
            prof.dump_stats(seat.out + ".prof")
        else:
            result, stats = go()
        used = os.times()
        report.update(ok=True, wall=time.monotonic() - started, cpu_user_s=round(used.user - cpu.user, 4),
                      cpu_sys_s=round(used.system - cpu.system, 4), **stats)
        report.setdefault("blocks_sent", report.get("blocks", 0))   # dense: every block travels
        np.save(seat.out + ".npy", result)
    except Exception as exc:  # reported to the parent by rank, with the reason
        report.update(error=f"{type(exc).__name__}: {exc}", traceback=traceback.format_exc())
    with open(seat.out + ".json", "w") as f:
        json.dump(report, f)
    return 0 if report["ok"] else 1


def _prepare_in_network(plan: RunPlan, seat: WorkerSeat, data):
    """switchml / omnireduce: the agent sends blocks to the service address; switches sum."""
    from hosts.agent import UdpTransport, allreduce

    spec = plan.spec
    options = {"sparse": True, "block_size": spec.blocks} if spec.algorithm == "omnireduce" else {}
    transport = UdpTransport(seat.local_ip, plan.service_ip)
    watcher = EpochFile(plan.epoch_file) if plan.epoch_file else None
    progress = ProgressFile(seat.progress) if seat.progress else None

    def go():
        first = watcher.poll() if watcher else None
        result, stats = allreduce(data, transport=transport, rank=seat.rank, workers=spec.workers,
                                  job=spec.job, window=plan.window, give_up=spec.give_up,
                                  epoch=first["epoch"] if first else 0,
                                  tree_of_slot=first["tree_of_slot"] if first else None,
                                  control=watcher.poll if watcher else None,
                                  on_progress=progress, link_mbps=seat.link_mbps, return_stats=True,
                                  **options)
        return result, _stats_dict(stats)
    return go


def _host_baseline(allreduce):
    """ring / ps: the hosts sum over TCP to their peers' addresses; switches only forward."""
    def prepare(plan: RunPlan, seat: WorkerSeat, data):
        progress = ProgressFile(seat.progress) if seat.progress else None

        def go():
            result, stats = allreduce(data, rank=seat.rank, peers=plan.peers(), port=BASE_PORT + plan.spec.job,
                                      give_up=plan.spec.give_up, return_stats=True, on_progress=progress)
            return result, _stats_dict(stats)
        return go
    return prepare


def _prepare_bml(run_plan: RunPlan, seat: WorkerSeat, data):
    with open(seat.bml_plan) as f:
        plan = json.load(f)
    give_up = run_plan.spec.give_up
    if plan["variant"] == "host":
        from hosts.bml_host import plan_from_json, run_host_bml

        nic_ip = {tuple([k.split("|")[0], int(k.split("|")[1])]): ip for k, ip in plan["nic_ip"].items()}
        schedule = plan_from_json(plan["schedule"])

        def run():
            result, stats = run_host_bml(data, plan["me"], schedule, nic_ip, timeout=give_up * 3,
                                         return_stats=True)
            return result, {"packets_sent": 0, "retransmissions": 0, "bytes_sent": _get(stats, "bytes_sent")}
    else:
        from hosts.bml import allreduce_bml

        def run():
            return allreduce_bml(data, plan, run_plan.service_ip, give_up=give_up, link_mbps=seat.link_mbps)

    def go():
        started = time.monotonic()
        result, stats = run()
        stats["seconds"] = time.monotonic() - started
        return result, stats
    return go


# spec.algorithm -> how one rank prepares its allreduce (BML seats, which carry a plan, go to
# _prepare_bml): a call returning the zero-argument function that runs it
RUNNERS = {"switchml": _prepare_in_network, "omnireduce": _prepare_in_network,
           "ring": _host_baseline(ring.allreduce), "ps": _host_baseline(ps.allreduce)}


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


def _get(stats, key):
    return stats.get(key, 0) if isinstance(stats, dict) else getattr(stats, key, 0)


def _stats_dict(stats) -> dict:
    if hasattr(stats, "__dataclass_fields__"):
        from dataclasses import asdict

        return asdict(stats)
    return dict(vars(stats))


if __name__ == "__main__":
    sys.exit(main())
