"""Entry point of one worker process inside a Mininet host namespace.

Generates its gradient from (rank, seed), runs the allreduce through the switch and
writes the result (.npy) and its statistics (.json) for the checker in emulation/session.py.
Errors are written to the JSON too, so the parent can report them by rank.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import sys
import time
import traceback
from dataclasses import asdict

import numpy as np

from agglab.ground.priority import as_batch_work
from agglab.ground.progress import ProgressFile
from agglab.ground.timerslack import set_timer_slack
from agglab.ground.runspec import RunPlan, WorkerSeat
from agglab.ground.start_gate import wait_at_end, wait_to_start
from agglab.ground.epoch_file import EpochFile  # noqa: F401 (the agents' reader, imported from here by harnesses)
from agglab.hosts.bml import ScheduleChanged, allreduce_bml, allreduce_relay, finished, linger
from agglab.hosts.bml_host import connect_host_bml, plan_from_json, run_host_bml
from agglab.hosts.communicator import Communicator
from agglab.hosts.gradients import gradient_for
from agglab.hosts.iterations import run_iterations


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

    Everything a rank needs before its first packet (its input, imports, sockets, and the
    call's own state: `Communicator.ready`) is done before the start gate, and the rank
    writes its files only after the end gate (ground/start_gate.py), so the time measured is
    the allreduce's: from every rank ready to this rank holding the result."""
    spec = plan.spec
    report: dict = {"rank": seat.rank, "ok": False}
    clock: dict = {}

    def at_start_gate() -> None:
        """Once: what this rank cost before its first packet, then the start gate."""
        if clock:
            return
        ready = os.times()           # imports, input, socket, the call's state
        report["start_cpu_s"] = round(ready.user + ready.system, 4)
        report["gate_wait_s"] = round(wait_to_start(spec.give_up * 3), 4)
        clock.update(started=time.monotonic(), cpu=os.times())
    try:
        data = gradient_for(spec, seat.rank)
        prepare = _prepare_bml if seat.bml_plan else _prepare_scheme
        go = prepare(plan, seat, data, at_start_gate)
        if os.environ.get("AGGLAB_PROFILE"):
            prof = cProfile.Profile(time.process_time)
            result, stats = prof.runcall(go)
            prof.dump_stats(seat.out + ".prof")
        else:
            result, stats = go()
        at_start_gate()              # (passed already, unless the call failed before it)
        ended, used = time.monotonic(), os.times()
        report["end_wait_s"] = round(wait_at_end(spec.give_up), 4)    # peers read their result meanwhile
        cpu = clock["cpu"]
        # the two ends on this machine's CLOCK_MONOTONIC: the ranks' start and end skews (--keep),
        # and the run's own length, first start to last end (emulation/fidelity.py run_seconds)
        report.update(passed_gate_at=clock["started"], done_at=ended)
        report.update(ok=True, wall=ended - clock["started"], cpu_user_s=round(used.user - cpu.user, 4),
                      cpu_sys_s=round(used.system - cpu.system, 4), **stats)
        report.setdefault("blocks_sent", report.get("blocks", 0))   # dense: every block travels
        report.update(memory_mb())
        np.save(seat.out + ".npy", result)
    except Exception as exc:  # reported to the parent by rank, with the reason
        report.update(error=f"{type(exc).__name__}: {exc}", traceback=traceback.format_exc())
    with open(seat.out + ".json", "w") as f:
        json.dump(report, f)
    return 0 if report["ok"] else 1


def _prepare_scheme(plan: RunPlan, seat: WorkerSeat, data, at_start_gate):
    """Any scheme of ground/schemes.py: its runner in the hosts' one registry
    (hosts/schemes RUNNERS), with the progress file counting blocks. The call passes the
    start gate once its state is built (`Communicator.ready`); a job that trains passes it
    before its offset and first compute (hosts/iterations.py: its clock starts there)."""
    comm = Communicator(plan, seat.rank, block_progress=True)
    comm.prepare(data)                  # before the start gate: a baseline's connections
    comm.on_ready = at_start_gate

    def once():
        result, stats = comm.allreduce_with_stats(data)
        return result, _stats_dict(stats)
    if plan.spec.training:              # jobs that train (hosts/iterations.py)
        def train():
            comm.ready()
            return run_iterations(once, plan.spec, plan.spec.tenant)
        return train
    return once


def _prepare_bml(run_plan: RunPlan, seat: WorkerSeat, data, at_start_gate):
    with open(seat.bml_plan) as f:
        plan = json.load(f)
    give_up = run_plan.spec.give_up
    if plan["variant"] == "host":
        nic_ip = {tuple([k.split("|")[0], int(k.split("|")[1])]): ip for k, ip in plan["nic_ip"].items()}
        schedule = plan_from_json(plan["schedule"])
        # its connections open before the start gate, as the other host baselines' (Communicator.prepare)
        connected = connect_host_bml(plan["me"], schedule, nic_ip, timeout=give_up * 3)

        def run():
            result, stats = run_host_bml(data, plan["me"], schedule, nic_ip, timeout=give_up * 3,
                                         return_stats=True, connected=connected)
            return result, {"packets_sent": 0, "retransmissions": 0, "bytes_sent": _get(stats, "bytes_sent"),
                            "setup_seconds": stats["setup_seconds"]}
    else:
        progress = ProgressFile(seat.progress) if seat.progress else None
        options = dict(give_up=give_up, link_mbps=seat.link_mbps, epoch_file=run_plan.epoch_file,
                       on_progress=progress)

        markers = [s.out + ".done" for s in run_plan.seats]

        def run():
            """BML's schedule, or the relay schedule the controller re-planned after a failure
            (from this server's own input again, as often as it re-plans); then wait until
            no server can need this one any more (hosts/bml.py linger)."""
            current = plan
            while True:
                try:
                    epoch = current.get("epoch", 0)
                    if current["variant"] == "relay":
                        out = allreduce_relay(data, current, run_plan.service_ip, **options)
                    else:
                        out = allreduce_bml(data, current, run_plan.service_ip, **options)
                    finished(seat.out + ".done", epoch)
                    linger(markers, epoch, run_plan.epoch_file, give_up * 3)
                    return out
                except ScheduleChanged as change:
                    with open(seat.bml_plan.replace(".bml.json", f".e{change.epoch}.bml.json")) as f:
                        current = json.load(f)

    def go():
        at_start_gate()
        started = time.monotonic()
        result, stats = run()
        stats["seconds"] = time.monotonic() - started
        return result, stats
    return go


def memory_mb() -> dict:
    """This process's resident memory (MB): `rss_mb` counts every page it maps, `pss_mb`
    shares each page among the processes that map it (what one more worker costs the
    machine when its pages are shared, as a forked one's are). Empty if /proc says nothing."""
    try:
        with open("/proc/self/smaps_rollup") as f:
            kb = {line.split(":")[0]: int(line.split()[1]) for line in f if line.split(":")[0] in ("Rss", "Pss")}
        return {"rss_mb": round(kb["Rss"] / 1024, 1), "pss_mb": round(kb["Pss"] / 1024, 1)}
    except (OSError, KeyError, ValueError, IndexError):
        return {}


def _get(stats, key):
    return stats.get(key, 0) if isinstance(stats, dict) else getattr(stats, key, 0)


def _stats_dict(stats) -> dict:
    if isinstance(stats, dict):
        return dict(stats)
    if hasattr(stats, "__dataclass_fields__"):
        return asdict(stats)
    return dict(vars(stats))


if __name__ == "__main__":
    sys.exit(main())
