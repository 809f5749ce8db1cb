"""One complete allreduce in a fresh emulated network: build, program, run, check, tear down.

Used by `agglab allreduce`, the experiments and the end-to-end tests. Every worker
runs as its own process inside its Mininet host; the checker recomputes each
worker's input from (rank, seed) and compares the returned aggregate with numpy.

The session holds the network, the job and the switches' drop simulators, and assembles a
run's result; the workers' processes (their plan, start gate, wait and reports) are
emulation/workers.py's.
"""

from __future__ import annotations

import contextlib
import json
import threading
from dataclasses import replace
from pathlib import Path

from agglab.controller import drop_sim, forward, policer, trees
from agglab.controller.events import EventLog
from agglab.controller.installers import JobSeat, job_for
from agglab.controller.job_group import JobGroup
from agglab.controller.job_protocol import Job
from agglab.controller.run_check import CheckedRun, check_override, check_run
from agglab.controller.standby import StandbyWorker
from agglab.controller.switch_batches import run_batches
from agglab.controller.topology import switches, tenant_hosts, workers as worker_hosts
from agglab.emulation.chaos import Chaos, draw
from agglab.emulation.failures import hang_rows, late_rows
from agglab.emulation.network import EmulatedNetwork
from agglab.emulation.pool_occupancy import PoolSampler
from agglab.emulation.training_jobs import resolve_compute
from agglab.emulation.wire_model import BoundError, wire_seconds
from agglab.emulation.workers import run_tenants, run_workers, say
from agglab.ground import netlease, wire
from agglab.ground.cluster_file import load
from agglab.ground.phases import Phases
from agglab.ground.runspec import RunSpec
from agglab.hosts.checker import check


def run_allreduce(quiet: bool = True, **kwargs) -> dict:
    """Run one allreduce described by RunSpec(**kwargs) in a fresh network and return the result."""
    return run_spec(RunSpec(**kwargs), quiet=quiet)


def run_spec(spec: RunSpec | CheckedRun, quiet: bool = True, progress: bool = False, warm: bool = False) -> dict:
    """Run one allreduce described by `spec` in a fresh network and return the result
    (`progress`: a bar of blocks done and their rate on stderr; `warm`: after
    `Session.warm_up`, which the result's `warm_up` records)."""
    with Session(spec, quiet=quiet, progress=progress) as session:
        warmed = session.warm_up() if warm else None
        result = session.allreduce()
        if warmed:
            result["warm_up"] = warmed
        result["events"] = session.events.lines()
        return result


# A warm-up allreduce fills each slot of the window this many times with whole blocks.
WARM_ROUNDS = 4


def warm_up_overrides(spec: RunSpec) -> dict:
    """The fields that make `spec` a network's warm-up: the same scheme, window and data
    plane, a few rounds of every slot (dense blocks: every slot carries full frames), and no
    failure, chaos, compute or offset (a warm-up must leave the network as it found it)."""
    window = spec.default_window()
    return dict(elements=window * (spec.block_size or wire.K) * WARM_ROUNDS, window=window, density=1.0,
                fail=[], fail_switch=[], hang_switch=[], chaos=None, iterations=1, compute_ms=None,
                compute_profile=None, job_offsets=[], length_override={})


def graph_for(spec: RunSpec):
    """The spec's checked topology graph (controller/run_check.py, the one validation entry point)."""
    return check_run(spec).graph


def run_wire_seconds(spec: RunSpec) -> float | None:
    """The run's wire time (emulation/wire_model.py: its bytes over its busiest link), to read
    its measured time against; None where the model has none (unshaped links, tenants,
    `tree@F` failures)."""
    if spec.jobs > 1 or spec.fail_switch:
        return None
    try:
        return round(wire_seconds(spec), 6)
    except (BoundError, ValueError, KeyError, ZeroDivisionError, trees.TreeError):
        return None


class Session:
    """A running network with forwarding, loss and one aggregation job (controller/job_protocol.py).

    `agglab allreduce` uses one per run; the interactive lab keeps one open and runs
    many allreduces on it while links fail and recover.
    """

    def __init__(self, spec: RunSpec | CheckedRun, quiet: bool = True, echo=None, progress: bool = False):
        checked = check_run(spec)              # once: a CheckedRun (from the CLI) is not checked again
        self.spec, self.quiet, self.progress = checked.spec, quiet, progress
        spec = checked.spec
        self.cancelled = threading.Event()     # cancel(): a running allreduce's workers are stopped
        self.g = checked.graph
        self.events = EventLog(echo=echo or (None if quiet else (lambda line: say(line, False))))
        if spec.cluster:                     # on the servers of a cluster (emulation/cluster/)
            from agglab.emulation.cluster.network import ClusterNetwork  # lazy: loads Mininet, only __init__() needs it

            self.net = ClusterNetwork(self.g, load(spec.cluster), backend=spec.backend, seed=spec.seed,
                                      pcap=spec.pcap, keep=spec.keep, t0=self.events.t0, tcp_cc=spec.tcp_cc)
        else:
            self.net = EmulatedNetwork(self.g, backend=spec.backend, seed=spec.seed, pcap=spec.pcap,
                                       keep=spec.keep, t0=self.events.t0, tcp_cc=spec.tcp_cc)
        self.job: Job | None = None
        self.monitor = None
        self.runs = 0
        self.loss: tuple | None = None      # what the switches' drop simulators are set to
        self._losses: dict[str, dict[int, float]] = {}   # switch -> port -> drop probability
        self.jobs: list[Job] = []           # one per tenant (--jobs); self.job is the first
        self.group: JobGroup | None = None  # every job, told of each failure once
        self.last_result: dict | None = None
        self.phases = Phases()              # the controller's steps of start() (the network's: net.phases)

    def start(self) -> "Session":
        if self.job is not None or self.net.run is not None:
            # a second network under the same names would fail half-built, and its clean-up
            # would take the first one down under its running link monitor
            raise RuntimeError("this Session is already started (use `with Session(spec) as s:` or start())")
        spec, g = self.spec, self.g
        netlease.refuse_if_busy()       # one line naming the other run, before anything is built
        n_sw = len(switches(g))
        say(f"building network: {spec.topology} ({n_sw} switch{'es' if n_sw > 1 else ''}, {spec.backend}), "
             f"{spec.workers} workers", self.quiet)
        try:
            if spec.on_trees:
                with self.phases.timed("standby"):
                    StandbyWorker.get()      # the standby's child imports while the network starts
            self.net.start()
            with self.phases.timed("forwarding"):
                forward.install_forwarding_all(self.net.clients, g)
            with self.phases.timed("drop simulators"):
                self._set_loss(spec)
            with self.phases.timed("job"):
                self._start_jobs(spec, g)
                self.group = JobGroup(self.jobs)
            with self.phases.timed("policer"):          # ports to hosts in no job (controller/policer.py)
                members = {h for job in self.jobs for h in job.workers}
                run_batches(self.net.clients, {sw: policer.policer_lines(policer.policed_ports(g, sw, members))
                                               for sw in switches(g) if sw not in self.net.dead})
            with self.phases.timed("watchers"):
                self.monitor = self.net.watch_links(self.group.link_changed)
                self.net.watch_switches(self._switch_exited, on_hang=lambda sw, t: self.events.add(
                    "switch_hung", t=t, switch=sw))
        except BaseException:
            self.stop()
            raise
        return self

    def _start_jobs(self, spec: RunSpec, g) -> None:
        """The aggregation job (or the tenants' jobs, or the host baselines' routes): its
        trees computed and installed."""
        if spec.jobs > 1:         # tenants: hosts of their own, shared switches (controller/installers.py)
            self.jobs = self._tenant_jobs(spec, g)
            self.job = self.jobs[0]
        else:                       # the scheme's installer (BML's on BCube)
            self.job = job_for(JobSeat(spec, g, self.net.clients, worker_hosts(g), self.net.run.path / "epoch.json",
                                       self.events, job=spec.job))
        self.jobs = self.jobs or [self.job]

    def _tenant_jobs(self, spec: RunSpec, g) -> list[Job]:
        """--jobs J: job j (id spec.job + j) aggregates the worker hosts tenant_hosts gives it;
        a partitioned scheme in slots j*S .. (j+1)*S - 1, S = AGG_SLOTS // J, a pool-sharing
        one (ATP) anywhere in the pool."""
        size, replies = spec.slots_per_job, {}
        return [job_for(JobSeat(spec, g, self.net.clients, hosts, self.net.run.path / f"epoch{j}.json", self.events,
                                job=spec.job + j, tenant=j, slot_base=j * size, slots=size, reply_ports=replies))
                for j, hosts in enumerate(tenant_hosts(g, spec.jobs, spec.placement))]

    def _set_loss(self, spec: RunSpec) -> None:
        """Drop simulators: a job's worker links at its loss (--job-loss), every other port at --loss."""
        per_host = {}
        if spec.job_loss:
            for j, hosts in enumerate(tenant_hosts(self.g, spec.jobs, spec.placement)):
                per_host.update({h: spec.loss_of(j) for h in hosts})
        for sw in switches(self.g):
            self._losses[sw] = {e["ports"][sw]: per_host.get(nbr, spec.loss)
                                for _, nbr, e in self.g.edges(sw, data=True)}
        run_batches(self.net.clients, {sw: drop_sim.loss_lines(self._losses[sw]) for sw in switches(self.g)
                                       if sw not in self.net.dead})      # every switch's at once
        self.loss = (spec.loss, tuple(spec.job_loss))

    def loss_table(self, sw: str) -> dict[int, float]:
        """One switch's drop probability per port, as _set_loss last set it (none before any run)."""
        return self._losses.get(sw) or {e["ports"][sw]: 0.0 for _, _, e in self.g.edges(sw, data=True)}

    def _set_switch_loss(self, sw: str) -> None:
        """One switch's drop simulator as _set_loss last set it (no loss before any run)."""
        drop_sim.set_losses(self.net.client(sw), self.loss_table(sw))

    def _chaos(self, spec: RunSpec):
        """With --chaos SEED: the drawn fault schedule's injector, made once the progress files
        are known (emulation/chaos.py); else None."""
        if spec.chaos is None:
            return None

        faults = draw(spec.chaos, self.g)
        return lambda files: Chaos(self, faults, files, spec.chaos)

    # -- switch failures -------------------------------------------------------------
    def _switch_exited(self, name: str, code: int, t: float) -> None:
        """The switch watcher's callback (its thread): a dead switch is a failure of all its
        links; the jobs reroute around it. Never raises into the watcher."""
        self.events.add("switch_exited", t=t, switch=name, code=code)
        try:
            self.group.switch_changed(name, False, t)
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
            self._set_switch_loss(name)
            members = {h for job in self.jobs for h in job.workers}
            self.net.client(name).commands(policer.policer_lines(policer.policed_ports(self.g, name, members)))

        self.group.switch_changed(name, True, t, program=program)
        return t

    def _switch_counters(self) -> dict[tuple[str, int], dict[str, int]]:
        """agg_stats per (live switch, incarnation): a restarted switch counts from 0 again."""
        return {(sw, self.net.incarnation.get(sw, 0)): c for sw, c in self.job.switch_stats().items()}

    def allreduce(self, **overrides) -> dict:
        spec = replace(self.spec, **overrides) if overrides else self.spec
        spec = resolve_compute(spec)                          # --compute-profile: its compute_ms
        if overrides:                                         # the lab's `allreduce --loss P --fail tree@F`
            check_override(spec, self.g, {e for t in self.job.trees().trees for e in t.edges}
                           if spec.on_trees else None)
        if (spec.loss, tuple(spec.job_loss)) != self.loss:     # the lab's `allreduce --loss P`
            with self.job.locked():
                self._set_loss(spec)
        if len(self.jobs) > 1:
            return self._tenant_allreduce(spec)
        self.job.prepare(spec.default_window(), spec.algorithm)
        self.runs += 1
        before = self._switch_counters()
        hangs_before, late_before = len(self.net.hang_log), len(self.net.late)
        say(f"allreduce of {spec.elements} {spec.dtype} per worker on {len(self.job.trees().trees)} "
             f"{spec.tree} tree(s), packet loss {spec.loss * 100:g}% per link direction", self.quiet)
        probe, reports = self.net.fidelity_probe(), []
        try:
            with self.job.running():
                reports, injector = run_workers(self.net, spec, self.job, self.quiet, f"run{self.runs}",
                                                progress=self.progress, cancel=self.cancelled,
                                                make_injector=self._chaos(spec), on_start=probe.begin)
        finally:
            fidelity = probe.stop() if spec.cluster else probe.stop(run_seconds(reports))
        dead = self.net.check_switches()
        after = self._switch_counters()       # under the job's lock: a reroute may still be tidying up
        counted: dict[str, int] = {}          # a dead switch's counts died with it
        for key, counters in after.items():
            for k, v in counters.items():
                counted[k] = counted.get(k, 0) + v - before.get(key, {}).get(k, 0)
        result = check(spec, reports, counted)
        treeset = self.job.trees()
        result.update(topology=spec.topology, tree=spec.tree, trees=len(treeset.trees),
                      epoch=treeset.epoch, failures=failure_rows(injector, spec, reports),
                      switches_down={sw: why.splitlines()[0] for sw, why in sorted(dead.items())},
                      hangs=hang_rows(self.net, self.job)[hangs_before:],
                      late=late_rows(self.net, late_before))
        if spec.chaos is not None:
            result["chaos"] = injector.summary()
        result["fidelity"] = fidelity       # link-bound or CPU-bound? (emulation/fidelity.py)
        result["jobs"] = [_job_figures(result, self.job, spec)]
        if spec.cluster:
            result["cluster"] = self.net.servers_of()
        return self._finish(spec, result)

    def warm_up(self) -> dict:
        """One small untimed allreduce (`warm_up_overrides`) before the timed ones; returns
        what a timed row records of it.

        Why: a fresh BMv2 switch's first packets grow the malloc arenas of its pipeline
        threads (~66 MB, 16.7k minor faults in the first OmniReduce call of 8 workers), which
        no later run pays: that first call took 0.31-0.44 s with 105-127 resends against
        0.12-0.15 s and none for the next ones, and was flagged CPU-bound (docs/measurements.md,
        2026-12-07, ninth session). A real switch has no such start-up, so every network of
        a suite gets the warm-up, whatever its scheme or backend."""
        r = self.allreduce(**warm_up_overrides(self.spec))
        return {"elements": r.get("elements"), "ok": r.get("ok"), "seconds": r.get("seconds"),
                "retransmissions": r.get("retransmissions")}

    def _finish(self, spec: RunSpec, result: dict) -> dict:
        if result.get("ok") and "wire_seconds" not in result:
            result["wire_seconds"] = run_wire_seconds(spec)
        result["host_tcp"] = self.net.host_tcp     # what the hosts' TCP ran with (ground/host_tcp.py)
        if spec.keep:
            result["kept"] = str(Path(spec.keep) / f"run{self.runs}")
        (self.net.run.path / f"run{self.runs}" / "result.json").write_text(
            json.dumps(result, sort_keys=True, indent=1, default=str))
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
        say(f"{len(tenants)} concurrent allreduces of {spec.elements} {spec.dtype} x {spec.workers} workers "
             f"(jobs {spec.job}..{spec.job + spec.jobs - 1}), {spec.slots_per_job} slots each", self.quiet)
        probe, reports = self.net.fidelity_probe(), []
        sampler = self._pool_sampler(spec)
        hangs_before, late_before = len(self.net.hang_log), len(self.net.late)
        try:
            with contextlib.ExitStack() as running:
                for _, job in tenants:
                    running.enter_context(job.running())
                reports, injector = run_tenants(self.net, tenants, self.quiet, f"run{self.runs}",
                                                progress=self.progress, cancel=self.cancelled, group=self.group,
                                                make_injector=self._chaos(spec), on_start=probe.begin)
        finally:   # the run's own length, as for one job (a cluster's servers have clocks of their own)
            fidelity = probe.stop() if spec.cluster else probe.stop(run_seconds([r for job in reports for r in job]))
            occupancy = sampler.stop() if sampler else None
        dead = self.net.check_switches()
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
            "loss": spec.loss, "algorithm": spec.algorithm, "values_per_packet": wire.K,
            "seconds": max((j["seconds"] for j in done), default=None),
            "goodput_mbps": min((j["goodput_mbps"] for j in done), default=None),    # the slowest job's
            "packets": sum(j["packets"] or 0 for j in per_job),
            "retransmissions": sum(j["retransmissions"] or 0 for j in per_job),
            "max_abs_error": max((j["max_abs_error"] for j in done), default=None),
            "error_bound": max((j["error_bound"] or 0 for j in per_job), default=0.0),
            "switch": stats, "topology": spec.topology, "tree": spec.tree,
            "trees": len(self.job.trees().trees), "epoch": self.job.trees().epoch,
            "failures": failure_rows(injector, spec, [r for job in reports for r in job]),
            "switches_down": {sw: why.splitlines()[0] for sw, why in sorted(dead.items())},
            "hangs": hang_rows(self.net, self.group)[hangs_before:],
            "late": late_rows(self.net, late_before),
            "fidelity": fidelity, "jobs": per_job,
        }
        if occupancy is not None:
            result["pool_occupancy"] = occupancy | {"pool": spec.atp_pool_slots or (
                wire.CONST["ATP_POOL"] if spec.shares_pool else wire.SLOTS)}
        if spec.chaos is not None:
            result["chaos"] = injector.summary()
        errors = [f"job {j['job']}: {e}" for j in per_job for e in j.get("errors", [])]
        if errors:
            result["errors"] = errors
        return self._finish(spec, result)

    def _pool_sampler(self, spec: RunSpec) -> PoolSampler | None:
        """With jobs that train or a scarce pool: the pool's occupancy sampled on every
        switch a job aggregates on (emulation/pool_occupancy.py); else None (no reads)."""
        if not (spec.training or spec.atp_pool_slots):
            return None
        on = set()
        for job in self.jobs:
            if hasattr(job, "expect"):                       # ATP: the switches with an atp_job entry
                on |= set(job.expect)
            else:                                            # a tree job: its trees' switches
                on |= {n for t in job.trees().trees for e in t.edges for n in e[:2]
                       if self.g.nodes[n].get("kind") == "switch"}
        return PoolSampler(self.net.clients, sorted(on - set(self.net.dead)), spec.shares_pool).start()

    def run_program(self, module: str, name: str, extra_args: tuple = (), deadline_s: float = 600.0):
        """Run `python -m MODULE run.json RANK *extra_args` on every worker host (a program
        using agglab.hosts.communicator, e.g. agglab.hosts.train_worker; AGGLAB_PLAN/AGGLAB_RANK are set),
        with the spec's scripted failures; return (reports by rank, failures)."""
        self.job.prepare(self.spec.default_window(), self.spec.algorithm)
        self.runs += 1
        with self.job.running():
            reports, injector = run_workers(self.net, self.spec, self.job, self.quiet, name,
                                            module, tuple(extra_args), deadline_s, cancel=self.cancelled)
        return reports, injector.report() if injector else []

    def cancel(self) -> None:
        """Stop the workers of an allreduce another thread is running (the lab's background
        one, when the lab is stopped): it then returns at once instead of at its deadline."""
        self.cancelled.set()

    def stop(self) -> None:
        try:
            for job in self.jobs or ([self.job] if self.job else []):
                job.stop()              # every tenant: teardown's link events are not failures
            if self.monitor:
                self.monitor.stop()
        finally:
            if self.net.run is not None:       # kept with the run directory (--keep)
                with contextlib.suppress(OSError):
                    (self.net.run.path / "events.log").write_text("".join(f"{line}\n" for line in self.events.lines()))
            self.net.stop()

    def __enter__(self) -> "Session":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def run_seconds(reports: list[dict]) -> float | None:
    """First worker's start to last worker's end, from their reports (one machine: one monotonic
    clock); None unless every worker finished. The fidelity probe's run length (emulation/fidelity.py)."""
    if not reports or not all(r.get("ok") and "passed_gate_at" in r and "done_at" in r for r in reports):
        return None
    return max(r["done_at"] for r in reports) - min(r["passed_gate_at"] for r in reports)


def failure_rows(injector, spec: RunSpec, reports: list[dict]) -> list[dict]:
    """The scripted failures' rows, each with `left_ms` (how much of the allreduce was left
    when it landed) when every worker finished on this machine's clock; chaos reports its own."""
    if injector is None:
        return []
    if spec.chaos is not None:
        return injector.report()
    seconds = None if spec.cluster else run_seconds(reports)
    return injector.report(max(r["done_at"] for r in reports) if seconds is not None else None)


def tenant_spec(spec: RunSpec, j: int) -> RunSpec:
    """What job j of a --jobs run is: its id, its own inputs (seed + j, so no two jobs sum the
    same arrays and a mix-up cannot pass the check) and its loss."""
    if spec.jobs == 1:
        return spec
    return replace(spec, job=spec.job + j, seed=spec.seed + j, loss=spec.loss_of(j), tenant=j)


def _job_figures(result: dict, job: Job, spec: RunSpec) -> dict:
    """One job's entry of the result's `jobs` list."""
    keys = ("ok", "exact", "seconds", "connect_seconds", "goodput_mbps", "packets", "retransmissions",
            "max_abs_error", "error_bound", "errors", "iterations", "iterations_per_s", "compute_ms", "offset_s",
            "rtt_min_ms", "allreduce_seconds")
    return {"job": job.job, "hosts": list(job.workers), "slot_base": getattr(job, "slot_base", 0),
            "slots": getattr(job, "slots", None), "window": job.window, "loss": spec.loss, "seed": spec.seed,
            **{k: result[k] for k in keys if k in result}}
