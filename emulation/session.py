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
    for f in spec.fail_switch_specs:
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
        self.loss: float | None = None      # what the switches' drop simulators are set to

    def start(self) -> "Session":
        spec, g = self.spec, self.g
        n_sw = len(switches(g))
        _log(f"building network: {spec.topology} ({n_sw} switch{'es' if n_sw > 1 else ''}, {spec.backend}), "
             f"{spec.workers} workers", self.quiet)
        self.net.start()
        try:
            for sw in switches(g):
                forward.install_forwarding(self.net.client(sw), g, sw)
            self._set_loss(spec.loss)
            if spec.host_baseline:    # ring, ps: hosts sum over TCP; the job keeps IP routes on live links
                self.job = ForwardingJob(g, self.net.clients, worker_hosts(g), spec.default_window(),
                                         self.net.run.path / "epoch.json", job=spec.job, events=self.events,
                                         algorithm=spec.algorithm).start()
            elif spec.tree == "bml":
                self.job = BmlJob(g, self.net.clients, spec.default_window(), self.net.run.path / "epoch.json",
                                  job=spec.job, events=self.events, variant=spec.bml_variant).start()
            else:
                self.job = TreeJob(g, self.net.clients, spec.tree, worker_hosts(g), spec.default_window(),
                                   self.net.run.path / "epoch.json", job=spec.job, events=self.events).start()
            self.monitor = self.net.watch_links(self.job.link_changed)
            self.net.watch_switches(self._switch_exited)
        except BaseException:
            self.stop()
            raise
        return self

    def _set_loss(self, loss: float) -> None:
        for sw in switches(self.g):
            if sw not in self.net.dead:
                self._set_switch_loss(sw, loss)
        self.loss = loss

    def _set_switch_loss(self, sw: str, loss: float) -> None:
        ports = [e["ports"][sw] for _, _, e in self.g.edges(sw, data=True)]
        drop_sim.set_loss(self.net.client(sw), ports, loss)

    # -- switch failures -------------------------------------------------------------
    def _switch_exited(self, name: str, code: int, t: float) -> None:
        """The switch watcher's callback (its thread): a dead switch is a failure of all its
        links; the job reroutes around it. Never raises into the watcher."""
        self.events.add("switch_exited", t=t, switch=name, code=code)
        try:
            self.job.switch_changed(name, False, t)
        except Exception as exc:  # noqa: BLE001 - logged: the watcher must keep watching
            self.events.add("switch_failure_error", switch=name, error=str(exc).splitlines()[0][:200])

    def kill_switch(self, name: str, wait: float | None = 10.0) -> float:
        """`kill -9` a switch's process (the lab's `kill`); the watcher reports it to the job.
        Returns once the job has handled it (rerouted), or at once with `wait=None`."""
        return self.net.kill_switch(name, wait=wait)

    def restart_switch(self, name: str) -> float:
        """Start a dead switch again and re-program it: forwarding and the drop simulator here,
        then the job puts it back on its trees (now, or before the next allreduce if one runs)."""
        t = self.net.restart_switch(name)

        def program() -> None:
            forward.install_forwarding(self.net.client(name), self.g, name)
            self._set_switch_loss(name, self.loss or 0.0)

        self.job.switch_changed(name, True, t, program=program)
        return t

    def _switch_counters(self) -> dict[tuple[str, int], dict[str, int]]:
        """agg_stats per (live switch, incarnation): a restarted switch counts from 0 again."""
        return {(sw, self.net.incarnation.get(sw, 0)): c for sw, c in self.job.switch_stats().items()}

    def allreduce(self, **overrides) -> dict:
        spec = replace(self.spec, **overrides) if overrides else self.spec
        spec.validate()
        for f in spec.fail_specs:
            f.check(self.g)
        for f in spec.fail_switch_specs:
            f.check(self.g)
        if spec.loss != self.loss:              # the lab's `allreduce --loss P`
            with self.job.locked():
                self._set_loss(spec.loss)
        self.job.prepare(spec.default_window(), spec.algorithm)
        self.runs += 1
        before = self._switch_counters()
        _log(f"allreduce of {spec.elements} {spec.dtype} per worker on {len(self.job.trees().trees)} "
             f"{spec.tree} tree(s), loss {spec.loss}", self.quiet)
        probe = FidelityProbe(self.net.graph, self.net.run.path / "pids").start()
        try:
            with self.job.running():
                reports, injector = _run_workers(self.net, spec, self.job, self.quiet, f"run{self.runs}")
        finally:
            fidelity = probe.stop()
        dead = self.net.check_switches()
        after = self._switch_counters()       # under the job's lock: a reroute may still be tidying up
        counted: dict[str, int] = {}          # a dead switch's counts died with it
        for key, counters in after.items():
            for k, v in counters.items():
                counted[k] = counted.get(k, 0) + v - before.get(key, {}).get(k, 0)
        result = check(spec, reports, counted)
        treeset = self.job.trees()
        result.update(topology=spec.topology, tree=spec.tree, trees=len(treeset.trees),
                      epoch=treeset.epoch, failures=injector.report() if injector else [],
                      switches_down={sw: why.splitlines()[0] for sw, why in sorted(dead.items())})
        result["fidelity"] = fidelity       # link-bound or CPU-bound? (emulation/fidelity.py)
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


def _run_workers(net: EmulatedNetwork, spec: RunSpec, job: Job, quiet: bool, name: str,
                 module: str = "hosts.worker", extra_args: tuple = (), deadline_s: float | None = None):
    workers = job.workers
    out_dir = net.run.path / name
    out_dir.mkdir()
    env = dict(os.environ, PYTHONPATH=str(REPO))
    plans = job.write_plans(out_dir)
    seats = [WorkerSeat(rank=rank, local_ip=net.graph.nodes[h]["ip"], out=str(out_dir / f"rank{rank}"),
                        progress=str(out_dir / f"rank{rank}.progress"),
                        bml_plan=str(plans[h]) if h in plans else None)
             for rank, h in enumerate(workers)]
    plan = RunPlan(spec, SERVICE_IP, job.window, str(job.epoch_file), seats).write(out_dir / "run.json")
    procs = []
    for rank, h in enumerate(workers):
        argv = [sys.executable, "-m", module, str(plan), str(rank), *extra_args]
        log = open(out_dir / f"rank{rank}.log", "wb")
        proc = net.host(h).popen(argv, stdout=log, stderr=log, cwd=str(REPO),
                                 env=dict(env, AGGLAB_PLAN=str(plan), AGGLAB_RANK=str(rank)))
        net.run.add_pid(proc.pid, f"worker {rank} on {h}")
        procs.append((rank, proc, log))
    injector = None
    if spec.fail_specs or spec.fail_switch_specs:
        injector = FailureInjector(net, job, [*spec.fail_specs, *spec.fail_switch_specs],
                                   [out_dir / f"rank{r}.progress" for r in range(len(workers))], spec.seed)
        injector.start()
    deadline = time.monotonic() + (deadline_s or spec.give_up * 3 + 30 + spec.elements * spec.workers / 50_000)
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
    reports = []
    for rank, proc, _ in procs:
        path = out_dir / f"rank{rank}.json"
        if path.exists():
            reports.append(json.loads(path.read_text()))
        else:
            tail = (out_dir / f"rank{rank}.log").read_text(errors="replace")[-1500:]
            reports.append({"rank": rank, "ok": False, "error": f"worker {rank} exited with "
                            f"{proc.returncode} and no report; log tail:\n{tail}"})
        if reports[-1].get("ok") and (out_dir / f"rank{rank}.npy").exists():
            reports[-1]["result"] = np.load(out_dir / f"rank{rank}.npy")
    if injector:
        injector.stop()
        injector.join(1)
    return reports, injector
