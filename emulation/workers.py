"""The allreduce's worker processes on the network's hosts: started, gated, waited for, read.

Why a module of its own: a run's workers are the one part of a session that is about
processes rather than the network or the job. For each run the session (emulation/session.py)
hands over the job, and this module writes the run's plan (ground/runspec.py RunPlan) with
every worker's seat, starts one process per rank in its Mininet host (forked by the
network's worker launcher), lets them all start together through one start gate once they are
ready and the job's standby trees are computed (and leave together through its end gate), runs the spec's scripted failures (or chaos)
against the workers' progress, waits for every worker (killing what is left at the deadline
or on cancel, with a progress bar or a line every 5 s) and reads back their reports. With
--jobs, every tenant's workers do this together (`run_tenants`).
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from pathlib import Path

import numpy as np

from agglab.controller.job_group import JobGroup
from agglab.controller.job_protocol import Job
from agglab.emulation.failures import FailureInjector
from agglab.emulation.network import EmulatedNetwork
from agglab.emulation.training_jobs import extra_seconds, per_call_allowance
from agglab.ground.addresses import SERVICE_IP
from agglab.ground import progress as progress_file
from agglab.ground import lifeline
from agglab.ground.paths import IMPORT_ROOT
from agglab.ground.runspec import RunPlan, RunSpec, WorkerSeat
from agglab.ground.start_gate import StartGate


def say(msg: str, quiet: bool) -> None:
    """One line for the person running (the session's steps, the workers' progress), unless quiet."""
    if not quiet:
        print(f"[agglab] {msg}", file=sys.stderr, flush=True)


def run_tenants(net: EmulatedNetwork, tenants: list, quiet: bool, name: str, progress: bool = False,
                cancel: threading.Event | None = None, group: JobGroup | None = None, make_injector=None,
                on_start=None):
    """Start every job's workers at once (one start gate for all), with the spec's scripted
    failures (each one event for every job: `group`), wait for all; per job its reports by
    rank, and the failure injector (None without failures). `on_start()` is called when the
    gate opens (the fidelity probe's `begin`)."""
    out_dir = net.run.path / name
    out_dir.mkdir()
    gate = StartGate()
    spec = tenants[0][0]
    files = [out_dir / f"job{t}-rank{r}.progress" for t, (_, job) in enumerate(tenants) for r in range(len(job.workers))]
    # scripted failures or chaos (progress: the slowest worker of any job), started before the gate (scripted())
    injector = scripted(net, spec, group or JobGroup([job for _, job in tenants]), files, make_injector)
    try:
        started = [_start_workers(net, tspec, job, out_dir, f"job{t}-", gate=gate, marks=_marks(injector))
                   for t, (tspec, job) in enumerate(tenants)]
        _open_gate(gate, [p for procs in started for p in procs], tenants[0][0], quiet,
                   [job for _, job in tenants])
    except BaseException:
        gate.close()
        if injector:
            injector.stop()
        raise
    if on_start:
        on_start()
    deadline = time.monotonic() + spec.give_up * 3 + 30 + extra_seconds(spec) + per_call_allowance(
        spec, sum(s.elements * s.workers for s, _ in tenants))
    _wait([p for procs in started for p in procs], deadline, quiet, files if progress else None, cancel, gate)
    net.worker_outputs(out_dir)
    reports = [_collect(out_dir, procs, f"job{t}-") for t, procs in enumerate(started)]
    if injector:
        injector.stop()
        injector.join(1)
    return reports, injector


def scripted(net: EmulatedNetwork, spec: RunSpec, job, files: list[Path], chaos=None) -> FailureInjector | None:
    """The spec's scripted failures (`--fail`, `--fail-switch`, `--hang-switch`) or, with
    --chaos, `chaos(files)`'s schedule (emulation/chaos.py), started now; None without either.
    Why before the start gate: a `tree@F` failure's link or switch is chosen when the injector
    starts, which took 0.8-1.0 s at 128 workers (emulation/failures.py), set-up time here and
    not the allreduce's; and an injector started after the gate (chaos's was, after the
    fidelity probe's start) is late for a fault at a small fraction of a short run."""
    if chaos is not None:
        injector = chaos(files)
    elif spec.fail_specs or spec.fail_switch_specs:
        injector = FailureInjector(net, job, [*spec.fail_specs, *spec.fail_switch_specs], files, spec.seed)
    else:
        return None
    injector.start()
    return injector


def _marks(injector) -> tuple[float, ...]:
    """The progress fractions a chaos schedule strikes at, for the workers' progress files
    (an update that reaches one is written at once: ground/progress.py). Scripted failures'
    fractions are in the spec, which the workers read themselves."""
    return tuple(getattr(injector, "marks", ()))


# How long workers wait at most, before an allreduce, for the standby trees of the job's
# current trees (controller/tree_job.py wait_standby): a k=4 fat-tree's 40 took 0.9-3 s here.
STANDBY_WAIT = 10.0


def _host_link_mbps(graph, host: str) -> float | None:
    """The rate of a host's own link (its slowest, for a multi-NIC BCube server); None when
    any of them is unshaped."""
    rates = [graph.edges[host, peer].get("bw") for peer in graph.neighbors(host)]
    return min(rates) if rates and all(rates) else None


def _open_gate(gate: StartGate, procs: list, spec: RunSpec, quiet: bool, jobs=()) -> None:
    """Let the workers start together once every one of them is ready (ground/start_gate.py)
    and the jobs' standby trees are computed (TreeJob.wait_standby, at most STANDBY_WAIT s;
    the workers prepare meanwhile); a worker that died before it got ready opens the gate for
    the others, whose allreduce then fails with its reason, as it did before there was a gate."""
    deadline = time.monotonic() + STANDBY_WAIT
    for job in jobs:
        wait = getattr(job, "wait_standby", None)
        if wait is not None and not wait(max(0.0, deadline - time.monotonic())):
            say(f"  standby trees not ready after {STANDBY_WAIT:.0f} s: starting anyway", quiet)
            break
    alive = lambda: all(p.poll() is None for _, p, _ in procs)   # noqa: E731
    if not gate.open_when_ready(len(procs), alive, timeout=max(60.0, spec.give_up * 3)):
        say(f"  start gate opened with {gate.seen} of {len(procs)} workers ready", quiet)


def _start_workers(net: EmulatedNetwork, spec: RunSpec, job: Job, out_dir: Path, prefix: str = "",
                   module: str = "agglab.hosts.worker", extra_args: tuple = (), gate: StartGate | None = None,
                   marks: tuple[float, ...] = ()) -> list:
    """One job's worker processes (rank, proc, log); its plan is `<prefix>run.json` (with
    `marks`, the fractions whose progress update is written at once). With a `gate` each
    worker inherits it and waits there once it is ready."""
    env = dict(os.environ, PYTHONPATH=str(IMPORT_ROOT), **(gate.env if gate else {}))
    plans = job.write_plans(out_dir)
    seats = [WorkerSeat(rank=rank, local_ip=net.graph.nodes[h]["ip"], out=str(out_dir / f"{prefix}rank{rank}"),
                        progress=str(out_dir / f"{prefix}rank{rank}.progress"),
                        bml_plan=str(plans[h]) if h in plans else None, link_mbps=_host_link_mbps(net.graph, h))
             for rank, h in enumerate(job.workers)]
    plan = RunPlan(spec, SERVICE_IP, job.window, str(job.epoch_file), seats, marks).write(out_dir / f"{prefix}run.json")
    procs = []
    for rank, h in enumerate(job.workers):
        argv = [sys.executable, "-m", module, str(plan), str(rank), *extra_args]
        log = open(out_dir / f"{prefix}rank{rank}.log", "wb")
        proc = net.start_worker(h, argv, log, cwd=str(IMPORT_ROOT), gate=gate,
                                preexec_fn=lifeline.preexec(bound_to_thread=True),    # _wait reaps them
                                env=dict(env, AGGLAB_PLAN=str(plan), AGGLAB_RANK=str(rank)))
        net.run.add_pid(proc.pid, f"worker {rank}" + (f" of job {job.job}" if prefix else "") + f" on {h}")
        procs.append((rank, proc, log))
    return procs


def _wait(procs: list, deadline: float, quiet: bool, progress_files: list[Path] | None = None,
          cancel: threading.Event | None = None, gate: StartGate | None = None) -> None:
    """Until every worker exits (killed at the deadline or on cancel); a progress bar over
    `progress_files`, else a line every 5 s. With the run's `gate`, its end gate opens once
    every worker has its result or one exited (ground/start_gate.py), and on the way out."""
    started = last = time.monotonic()      # the first line after 5 s, not "0/N finished after 0 s"
    bar = ProgressBar(progress_files) if progress_files else None
    alive = lambda: all(p.poll() is None for _, p, _ in procs)   # noqa: E731
    try:
        for rank, proc, log in procs:
            while proc.poll() is None:
                if gate is not None:
                    gate.open_end_when_done(len(procs), alive)
                if time.monotonic() > deadline or (cancel is not None and cancel.is_set()):
                    if gate is not None:
                        gate.close()       # the finished ones write their reports first
                    proc.kill()
                    break
                if bar:
                    bar.poll()
                elif time.monotonic() - last > 5:
                    last = time.monotonic()
                    done = sum(p.poll() is not None for _, p, _ in procs)
                    say(f"  {done}/{len(procs)} workers finished after {last - started:.0f} s", quiet)
                time.sleep(0.05)
            log.close()
    finally:
        if gate is not None:
            gate.close()
        if bar:
            bar.close()


def _collect(out_dir: Path, procs: list, prefix: str = "") -> list[dict]:
    """The workers' reports by rank (their result arrays loaded)."""
    reports = []
    for rank, proc, _ in procs:
        path = out_dir / f"{prefix}rank{rank}.json"
        if path.exists():
            reports.append(json.loads(path.read_text()))
        else:
            tail = (out_dir / f"{prefix}rank{rank}.log").read_text(errors="replace")[-1500:]
            reports.append({"rank": rank, "ok": False, "error": f"worker {rank} exited with "
                            f"{proc.returncode} and no report; log tail:\n{tail}"})
        if reports[-1].get("ok") and (out_dir / f"{prefix}rank{rank}.npy").exists():
            reports[-1]["result"] = np.load(out_dir / f"{prefix}rank{rank}.npy")
    return reports


def run_workers(net: EmulatedNetwork, spec: RunSpec, job: Job, quiet: bool, name: str,
                module: str = "agglab.hosts.worker", extra_args: tuple = (), deadline_s: float | None = None,
                progress: bool = False, cancel: threading.Event | None = None, make_injector=None,
                on_start=None):
    """Run one job's workers (through the start gate when `module` waits at it; `on_start()`
    is called when it opens) until they exit; their reports by rank and the failure injector."""
    out_dir = net.run.path / name
    out_dir.mkdir()
    gate = StartGate() if module == "agglab.hosts.worker" else None     # the programs that wait at it
    files = [out_dir / f"rank{r}.progress" for r in range(len(job.workers))]
    injector = scripted(net, spec, job, files, make_injector)
    try:
        procs = _start_workers(net, spec, job, out_dir, "", module, extra_args, gate=gate, marks=_marks(injector))
        if gate:
            _open_gate(gate, procs, spec, quiet, [job])
    except BaseException:
        if gate:
            gate.close()
        if injector:
            injector.stop()
        raise
    if on_start:
        on_start()
    deadline = time.monotonic() + (deadline_s or spec.give_up * 3 + 30 + extra_seconds(spec)
                                   + per_call_allowance(spec, spec.elements * spec.workers))
    _wait(procs, deadline, quiet, files if progress else None, cancel, gate)
    net.worker_outputs(out_dir)
    reports = _collect(out_dir, procs)
    if injector:
        injector.stop()
        injector.join(1)
    return reports, injector


class ProgressBar:
    """Blocks done by all workers and their rate, on stderr (tqdm), from the progress files
    the workers rewrite as they go (ground/progress.py)."""

    def __init__(self, files: list[Path]):
        from tqdm import tqdm  # lazy: tqdm, only __init__() needs it

        self.files = files
        self.bar = tqdm(total=None, unit=" blocks", file=sys.stderr, desc="allreduce", dynamic_ncols=True,
                        mininterval=0.2, smoothing=0.3)

    def poll(self) -> None:
        done = total = 0
        reported = 0
        for f in self.files:
            seen = progress_file.read(f)
            if seen is not None:
                done, total, reported = done + seen[0], total + seen[1], reported + 1
        if reported == len(self.files) and self.bar.total != total:
            self.bar.total = total
            self.bar.refresh()
        if done > self.bar.n:
            self.bar.update(done - self.bar.n)

    def close(self) -> None:
        self.poll()
        self.bar.close()
