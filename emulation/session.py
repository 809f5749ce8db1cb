"""One complete allreduce in a fresh emulated network: build, program, run, check, tear down.

Used by `agglab allreduce`, the experiments and the end-to-end tests. Every worker
runs as its own process inside its Mininet host; the checker recomputes each
worker's input from (rank, seed) and compares the returned aggregate with numpy.
"""

from __future__ import annotations

import json
import os
import sys
import time
from contextlib import ExitStack
from dataclasses import replace

import numpy as np

from controller import drop_sim, forward, topologies
from controller.bml_job import BmlJob
from controller.events import EventLog
from controller.forwarding_job import ForwardingJob
from controller.job import TreeJob
from controller.jobs import Job
from controller.topology import switches, workers as worker_hosts
from emulation.failures import FailureInjector
from emulation.fidelity import FidelityProbe
from emulation.network import EmulatedNetwork
from ground.addresses import SERVICE_IP
from ground.paths import REPO
from ground.runspec import RunPlan, RunSpec, WorkerSeat
from hosts.checker import check


def _log(msg: str, quiet: bool) -> None:
    if not quiet:
        print(f"[agglab] {msg}", file=sys.stderr, flush=True)


def run_allreduce(quiet: bool = True, **kwargs) -> dict:
    """Run one allreduce described by RunSpec(**kwargs) in a fresh network and return the result."""
    return run_spec(RunSpec(**kwargs), quiet=quiet)


def run_spec(spec: RunSpec, quiet: bool = True) -> dict:
    """Run one allreduce described by `spec` in a fresh network and return the result."""
    with Session(spec, quiet=quiet) as session:
        result = session.allreduce()
        result["events"] = session.events.lines()
        return result


def graph_for(spec: RunSpec):
    """The spec's topology graph, with every named --fail link checked against it. Needs no
    root and builds nothing: bad input (ValueError, TopologyError) surfaces before Mininet."""
    spec.validate()
    g = topologies.for_run(spec)
    for f in spec.fail_specs:
        f.check(g)
    if spec.tree == "bml":
        BmlJob.check(g)
    return g


class Session:
    """A running network with forwarding, loss and one aggregation job (controller/jobs.py).

    `agglab allreduce` uses one per run; the interactive lab keeps one open and runs
    many allreduces on it while links fail and recover.
    """

    def __init__(self, spec: RunSpec, quiet: bool = True, echo=None):
        self.spec, self.quiet = spec, quiet
        self.g = graph_for(spec)
        self.net = EmulatedNetwork(self.g, backend=spec.backend, seed=spec.seed)
        self.events = EventLog(echo=echo or (None if quiet else (lambda line: _log(line, False))))
        self.job: Job | None = None
        self.monitor = None
        self.runs = 0
        self.loss: tuple | None = None      # what the switches' drop simulators are set to
        self.jobs: list[Job] = []           # one per tenant (--jobs); self.job is the first
        self.last_result: dict | None = None

    def start(self) -> "Session":
        spec, g = self.spec, self.g
        n_sw = len(switches(g))
        _log(f"building network: {spec.topology} ({n_sw} switch{'es' if n_sw > 1 else ''}, {spec.backend}), "
             f"{spec.workers} workers", self.quiet)
        self.net.start()
        try:
            for sw in switches(g):
                forward.install_forwarding(self.net.client(sw), g, sw)
            self._set_loss(spec)
            if spec.jobs > 1:         # tenants: hosts of their own, shared switches, disjoint slot ranges
                self.jobs = self._tenant_jobs(spec, g)
                self.job = self.jobs[0]
            elif spec.host_baseline:    # ring, ps: hosts sum over TCP; the job keeps IP routes on live links
                self.job = ForwardingJob(g, self.net.clients, worker_hosts(g), spec.default_window(),
                                         self.net.run.path / "epoch.json", job=spec.job, events=self.events,
                                         algorithm=spec.algorithm).start()
            elif spec.tree == "bml":
                self.job = BmlJob(g, self.net.clients, spec.default_window(), self.net.run.path / "epoch.json",
                                  job=spec.job, events=self.events, variant=spec.bml_variant).start()
            else:
                self.job = TreeJob(g, self.net.clients, spec.tree, worker_hosts(g), spec.default_window(),
                                   self.net.run.path / "epoch.json", job=spec.job, events=self.events).start()
            self.jobs = self.jobs or [self.job]
            self.monitor = self.net.watch_links(self.job.link_changed)
        except BaseException:
            self.stop()
            raise
        return self

    def _tenant_jobs(self, spec: RunSpec, g) -> list[Job]:
        """--jobs J: job j (id spec.job + j) aggregates worker hosts j, j+J, j+2J, ... (interleaved,
        so the jobs cross the same switches) in slots j*S .. (j+1)*S - 1, S = AGG_SLOTS // J."""
        size, replies = spec.slots_per_job, {}
        jobs = []
        for j, hosts in enumerate(tenant_hosts(g, spec.jobs)):
            jobs.append(TreeJob(g, self.net.clients, spec.tree, hosts, spec.default_window(),
                                self.net.run.path / f"epoch{j}.json", job=spec.job + j, events=self.events,
                                slot_base=j * size, slots=size, reply_ports=replies).start())
        return jobs

    def _set_loss(self, spec: RunSpec) -> None:
        """Drop simulators: a job's worker links at its loss (--job-loss), every other port at --loss."""
        per_host = {}
        if spec.job_loss:
            for j, hosts in enumerate(tenant_hosts(self.g, spec.jobs)):
                per_host.update({h: spec.loss_of(j) for h in hosts})
        for sw in switches(self.g):
            drop_sim.set_losses(self.net.client(sw), {e["ports"][sw]: per_host.get(nbr, spec.loss)
                                                      for _, nbr, e in self.g.edges(sw, data=True)})
        self.loss = (spec.loss, tuple(spec.job_loss))

    def allreduce(self, **overrides) -> dict:
        spec = replace(self.spec, **overrides) if overrides else self.spec
        spec.validate()
        for f in spec.fail_specs:
            f.check(self.g)
        if (spec.loss, tuple(spec.job_loss)) != self.loss:     # the lab's `allreduce --loss P`
            with self.job.locked():
                self._set_loss(spec)
        if len(self.jobs) > 1:
            return self._tenant_allreduce(spec)
        self.job.prepare(spec.default_window(), spec.algorithm)
        self.runs += 1
        before = self.job.stats()
        _log(f"allreduce of {spec.elements} {spec.dtype} per worker on {len(self.job.trees().trees)} "
             f"{spec.tree} tree(s), loss {spec.loss}", self.quiet)
        probe = FidelityProbe(self.net.graph, self.net.run.path / "pids").start()
        try:
            with self.job.running():
                reports, injector = _run_workers(self.net, spec, self.job, self.quiet, f"run{self.runs}")
        finally:
            fidelity = probe.stop()
        self.net.check_switches()
        after = self.job.stats()       # under the job's lock: a reroute may still be tidying up
        result = check(spec, reports, {k: after[k] - before.get(k, 0) for k in after})
        treeset = self.job.trees()
        result.update(topology=spec.topology, tree=spec.tree, trees=len(treeset.trees),
                      epoch=treeset.epoch, failures=injector.report() if injector else [])
        result["fidelity"] = fidelity       # link-bound or CPU-bound? (emulation/fidelity.py)
        result["jobs"] = [_job_figures(result, self.job, spec)]
        self.last_result = result
        return result

    def _tenant_allreduce(self, spec: RunSpec) -> dict:
        """Every job's allreduce at once (--jobs): one result whose `exact` holds when every job's
        does, with each job's own figures under `jobs`."""
        tenants = [(tenant_spec(spec, j), job) for j, job in enumerate(self.jobs)]
        for tspec, job in tenants:
            job.prepare(tspec.default_window(), tspec.algorithm)
        self.runs += 1
        before = self.job.stats()
        _log(f"{len(tenants)} concurrent allreduces of {spec.elements} {spec.dtype} x {spec.workers} workers "
             f"(jobs {spec.job}..{spec.job + spec.jobs - 1}), {spec.slots_per_job} slots each", self.quiet)
        probe = FidelityProbe(self.net.graph, self.net.run.path / "pids").start()
        try:
            with ExitStack() as running:
                for _, job in tenants:
                    running.enter_context(job.running())
                reports = _run_tenants(self.net, tenants, self.quiet, f"run{self.runs}")
        finally:
            fidelity = probe.stop()
        self.net.check_switches()
        after = self.job.stats()
        stats = {k: after[k] - before.get(k, 0) for k in after}
        per_job = []
        for (tspec, job), reps in zip(tenants, reports):
            r = check(tspec, reps, {})
            r.pop("switch", None)
            per_job.append(_job_figures(r, job, tspec))
        done = [j for j in per_job if j["seconds"] is not None]
        result = {
            "ok": all(j["ok"] for j in per_job), "exact": all(j["exact"] for j in per_job),
            "backend": spec.backend, "workers": spec.workers, "elements": spec.elements, "dtype": spec.dtype,
            "loss": spec.loss, "algorithm": spec.algorithm,
            "seconds": max((j["seconds"] for j in done), default=None),
            "goodput_mbps": min((j["goodput_mbps"] for j in done), default=None),    # the slowest job's
            "packets": sum(j["packets"] or 0 for j in per_job),
            "retransmissions": sum(j["retransmissions"] or 0 for j in per_job),
            "max_abs_error": max((j["max_abs_error"] for j in done), default=None),
            "error_bound": max((j["error_bound"] or 0 for j in per_job), default=0.0),
            "switch": stats, "topology": spec.topology, "tree": spec.tree,
            "trees": len(self.job.trees().trees), "epoch": self.job.trees().epoch, "failures": [],
            "fidelity": fidelity, "jobs": per_job,
        }
        errors = [f"job {j['job']}: {e}" for j in per_job for e in j.get("errors", [])]
        if errors:
            result["errors"] = errors
        self.last_result = result
        return result

    def run_program(self, module: str, name: str, extra_args: tuple = (), deadline_s: float = 600.0):
        """Run `python -m MODULE run.json RANK *extra_args` on every worker host (a program
        using hosts.communicator, e.g. hosts.train_worker; AGGLAB_PLAN/AGGLAB_RANK are set),
        with the spec's scripted failures; return (reports by rank, failures)."""
        self.job.prepare(self.spec.default_window(), self.spec.algorithm)
        self.runs += 1
        with self.job.running():
            reports, injector = _run_workers(self.net, self.spec, self.job, self.quiet, name,
                                             module, tuple(extra_args), deadline_s)
        self.net.check_switches()
        return reports, injector.report() if injector else []

    def stop(self) -> None:
        if self.job:
            self.job.stop()
        if self.monitor:
            self.monitor.stop()
        self.net.stop()

    def __enter__(self) -> "Session":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def tenant_hosts(g, jobs: int) -> list[list[str]]:
    """Per job, its worker hosts in rank order: job j takes worker hosts j, j+J, j+2J, ...
    (interleaved, so on a fat-tree the jobs hang off different edge switches and share the
    aggregation and core switches)."""
    hosts = worker_hosts(g)
    return [hosts[j::jobs] for j in range(jobs)]


def tenant_spec(spec: RunSpec, j: int) -> RunSpec:
    """What job j of a --jobs run is: its id, its own inputs (seed + j, so no two jobs sum the
    same arrays and a mix-up cannot pass the check) and its loss."""
    if spec.jobs == 1:
        return spec
    return replace(spec, job=spec.job + j, seed=spec.seed + j, loss=spec.loss_of(j))


def _job_figures(result: dict, job: Job, spec: RunSpec) -> dict:
    """One job's entry of the result's `jobs` list."""
    keys = ("ok", "exact", "seconds", "goodput_mbps", "packets", "retransmissions", "max_abs_error",
            "error_bound", "errors")
    return {"job": job.job, "hosts": list(job.workers), "slot_base": getattr(job, "slot_base", 0),
            "slots": getattr(job, "slots", None), "window": job.window, "loss": spec.loss, "seed": spec.seed,
            **{k: result[k] for k in keys if k in result}}


def _run_tenants(net: EmulatedNetwork, tenants: list, quiet: bool, name: str) -> list[list[dict]]:
    """Start every job's workers at once, wait for all; per job its reports by rank."""
    out_dir = net.run.path / name
    out_dir.mkdir()
    started_all = [_start_workers(net, tspec, job, out_dir, f"job{t}-") for t, (tspec, job) in enumerate(tenants)]
    deadline = time.monotonic() + tenants[0][0].give_up * 3 + 30 + sum(
        s.elements * s.workers for s, _ in tenants) / 50_000
    _wait(net, [p for procs in started_all for p in procs], deadline, quiet)
    return [_collect(out_dir, procs, f"job{t}-") for t, procs in enumerate(started_all)]


def _start_workers(net: EmulatedNetwork, spec: RunSpec, job: Job, out_dir, prefix: str = "",
                   module: str = "hosts.worker", extra_args: tuple = ()) -> list:
    """One job's worker processes (rank, proc, log), its plan written as `<prefix>run.json`."""
    env = dict(os.environ, PYTHONPATH=str(REPO))
    plans = job.write_plans(out_dir)
    seats = [WorkerSeat(rank=rank, local_ip=net.graph.nodes[h]["ip"], out=str(out_dir / f"{prefix}rank{rank}"),
                        progress=str(out_dir / f"{prefix}rank{rank}.progress"),
                        bml_plan=str(plans[h]) if h in plans else None)
             for rank, h in enumerate(job.workers)]
    plan = RunPlan(spec, SERVICE_IP, job.window, str(job.epoch_file), seats).write(out_dir / f"{prefix}run.json")
    procs = []
    for rank, h in enumerate(job.workers):
        argv = [sys.executable, "-m", module, str(plan), str(rank), *extra_args]
        log = open(out_dir / f"{prefix}rank{rank}.log", "wb")
        proc = net.host(h).popen(argv, stdout=log, stderr=log, cwd=str(REPO),
                                 env=dict(env, AGGLAB_PLAN=str(plan), AGGLAB_RANK=str(rank)))
        net.run.add_pid(proc.pid, f"worker {rank} of job {job.job} on {h}")
        procs.append((rank, proc, log))
    return procs


def _wait(net: EmulatedNetwork, procs: list, deadline: float, quiet: bool) -> None:
    started, last = time.monotonic(), 0.0
    for rank, proc, log in procs:
        while proc.poll() is None:
            if time.monotonic() > deadline:
                proc.kill()
                break
            if time.monotonic() - last > 5:
                last = time.monotonic()
                done = sum(p.poll() is not None for _, p, _ in procs)
                _log(f"  {done}/{len(procs)} workers finished after {last - started:.0f} s", quiet)
            time.sleep(0.05)
        log.close()


def _collect(out_dir, procs: list, prefix: str = "") -> list[dict]:
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


def _run_workers(net: EmulatedNetwork, spec: RunSpec, job: Job, quiet: bool, name: str,
                 module: str = "hosts.worker", extra_args: tuple = (), deadline_s: float | None = None):
    out_dir = net.run.path / name
    out_dir.mkdir()
    procs = _start_workers(net, spec, job, out_dir, "", module, extra_args)
    injector = None
    if spec.fail_specs:
        injector = FailureInjector(net, job, spec.fail_specs,
                                   [out_dir / f"rank{r}.progress" for r in range(len(job.workers))], spec.seed)
        injector.start()
    deadline = time.monotonic() + (deadline_s or spec.give_up * 3 + 30 + spec.elements * spec.workers / 50_000)
    _wait(net, procs, deadline, quiet)
    reports = _collect(out_dir, procs)
    if injector:
        injector.stop()
        injector.join(1)
    return reports, injector
