"""`Communicator`: allreduce from a user's own training loop inside an agglab host.

Why: `agglab.hosts.agent.allreduce` needs a transport, the rank, the job, the window and the
controller's epoch file; hosts/worker.py wires those for one synthetic array. A training
loop calls allreduce thousands of times and must keep following reroutes between calls,
so this object holds that wiring once:

    from agglab.hosts.communicator import Communicator
    comm = Communicator.from_env()          # AGGLAB_PLAN / AGGLAB_RANK, set by agglab
    for step in range(steps):
        grad = model.gradient(batch)
        grad = comm.allreduce(grad) / comm.workers
        model.step(grad)
        comm.progress(step + 1, steps)      # lets --fail tree@0.5 land mid-training

The scheme comes from the run's spec (`--algorithm`, ground/schemes.py); each one is an
entry of `RUNNERS` (scheme name -> function(comm, array) -> (sum, stats)), the hosts'
one registry, built from the scheme modules (hosts/schemes/NAME.py): hosts/worker.py runs
the synthetic allreduce through it too, so a new scheme plugs in behind both with its module.
"""

from __future__ import annotations

import argparse
import json
import os
import time
import traceback

import numpy as np

from agglab.ground.epoch_file import EpochFile
from agglab.ground.priority import as_batch_work
from agglab.ground.progress import ProgressFile, interval_for as progress_interval
from agglab.ground.runspec import RunPlan
from agglab.ground.timerslack import set_timer_slack
from agglab.hosts.schemes import CALLS_READY, PREPARE, RUNNERS, SERVICE_TRANSPORT
from agglab.hosts import tcp_mesh as mesh_ports   # its BASE_PORT read at use (a harness moves it)
from agglab.hosts.tcp_mesh import open_mesh
from agglab.hosts.tcp_peer import hello_for
from agglab.hosts import transport as udp_transport   # its UdpTransport looked up at use (a harness swaps it)

class Communicator:
    """One rank of a job: `allreduce(array)` returns the sum over all workers."""

    def __init__(self, plan: RunPlan, rank: int, transport=None, block_progress: bool = False):
        """block_progress: the progress file counts blocks (hosts/worker.py's synthetic
        allreduce, where `--fail tree@F` triggers on the blocks done), not training steps."""
        self.plan, self.spec, self.rank = plan, plan.spec, rank
        self.seat = plan.seats[rank]
        self.workers = self.spec.workers
        if self.spec.algorithm not in RUNNERS:
            raise ValueError(f"no allreduce registered for algorithm {self.spec.algorithm!r} "
                             f"(have: {', '.join(sorted(RUNNERS))})")
        self._transport = transport
        self._watcher = EpochFile(plan.epoch_file) if plan.epoch_file else None
        self._route = (self._watcher.poll() if self._watcher else None) or {}
        # the fractions scripted failures (or a chaos schedule: the plan's) wait for: the update
        # that reaches one is written at once
        marks = {f.at for f in (*self.spec.fail_specs, *self.spec.fail_switch_specs)} | set(plan.marks)
        self._progress = ProgressFile(self.seat.progress, progress_interval(self.workers), marks) \
            if self.seat.progress else None
        self.block_progress = self._progress if block_progress else None
        self.calls, self.last_stats = 0, None
        self._mesh = None                  # the host baselines' connections (tcp_mesh)
        self._setup_seconds = 0.0          # what opening them took, reported with the next call
        self.call_log: list[tuple[int, float]] = []     # (bytes, seconds) of every call: its cost
        self.on_ready = None               # called once, by `ready` (hosts/worker.py: the start gate)
        if self.spec.algorithm in SERVICE_TRANSPORT:
            self.transport         # its socket open before the first call (and the start gate)

    @property
    def transport(self):
        """The agents' UDP transport to the service address, opened on first use (the host
        baselines open TCP connections of their own)."""
        if self._transport is None:
            self._transport = udp_transport.UdpTransport(self.seat.local_ip, self.plan.service_ip)
        return self._transport

    @classmethod
    def from_env(cls, transport=None) -> "Communicator":
        """The communicator of this process: agglab sets AGGLAB_PLAN (the run.json path) and
        AGGLAB_RANK for every program it starts in a host."""
        try:
            path, rank = os.environ["AGGLAB_PLAN"], int(os.environ["AGGLAB_RANK"])
        except KeyError as exc:
            raise RuntimeError(f"{exc.args[0]} is not set: start this program with agglab "
                               "(or pass Communicator(RunPlan.read(path), rank))") from None
        return cls(RunPlan.read(path), rank, transport)

    def prepare(self, array) -> None:
        """Set up what the scheme needs for arrays like `array` before the first call (the
        host baselines: their TCP connections), so that the first call's time is the
        allreduce's, as it is for the in-network schemes; hosts/worker.py does it before the
        start gate."""
        prepare = PREPARE.get(self.spec.algorithm)
        if prepare is not None:
            prepare(self, np.asarray(array))

    def tcp_mesh(self, algorithm: str, connections, array):
        """The host baselines' connections for arrays like `array` (hosts/tcp_mesh.py),
        opened on first use and kept for every later call, as NCCL keeps its rings and a
        parameter server its connections: a 128-worker PS opens 16,256 of them, whose
        handshakes would otherwise cross the emulated links on every call. `connections(rank,
        n)` says which ranks to connect to and accept from. A different length or dtype
        opens new ones."""
        hello = hello_for(algorithm, array, self.rank, self.workers)
        if self._mesh is not None and self._mesh.hello != hello:
            self.close()
        if self._mesh is None and self.workers > 1:
            out_to, in_from = connections(self.rank, self.workers)
            self._mesh = open_mesh(hello, self.plan.peers(), out_to, in_from, port=mesh_ports.BASE_PORT + self.spec.job,
                                   give_up=self.spec.give_up, link_mbps=self.seat.link_mbps)
            self._setup_seconds = self._mesh.setup_seconds
        return self._mesh

    def close(self) -> None:
        """Close the host baselines' connections (a process that ends closes them too)."""
        if self._mesh is not None:
            self._mesh.close()
            self._mesh = None

    def allreduce(self, array) -> np.ndarray:
        """Sum of `array` (int32 or float32, same shape on every rank) over the job's workers."""
        return self.allreduce_with_stats(array)[0]

    def ready(self) -> None:
        """Called by a scheme's runner once its call's own state is built (the block masks,
        the wire bytes, the per-slot lists), just before its first packet; the first time, it
        runs `on_ready` (hosts/worker.py's start gate: the session starts every rank together
        only once each has built its state, so the time measured is the collective's, not
        its ranks' set-up on shared cores). A scheme whose module does not say CALLS_READY is
        given it before its call."""
        hook, self.on_ready = self.on_ready, None
        if hook is not None:
            hook()

    def allreduce_with_stats(self, array):
        """(sum, stats): the scheme's runner from `RUNNERS`."""
        array = np.asarray(array)
        if self.spec.algorithm not in CALLS_READY:
            self.ready()
        started = time.monotonic()
        result, self.last_stats = RUNNERS[self.spec.algorithm](self, array)
        self.call_log.append((array.nbytes, time.monotonic() - started))
        self.calls += 1
        return result, self.last_stats

    def progress(self, done: int, total: int) -> None:
        """Report training progress (the session's scripted failures trigger on it)."""
        if self._progress:
            self._progress(done, total)

    # -- what the in-network algorithms need from the controller --------------------
    def poll_route(self) -> dict | None:
        """The controller's epoch file when it changed (a reroute), remembered for later calls."""
        new = self._watcher.poll() if self._watcher else None
        if new:
            self._route = new
        return new

    def route(self) -> dict:
        """The controller's epoch file as last read (polled now): {} when it wrote none."""
        self.poll_route()
        return self._route

    def agent_options(self) -> dict:
        self.poll_route()
        return {"transport": self.transport, "rank": self.rank, "workers": self.workers,
                "job": self.spec.job, "window": self.plan.window, "give_up": self.spec.give_up,
                "epoch": self._route.get("epoch", 0), "tree_of_slot": self._route.get("tree_of_slot"),
                "tree_mbps": self._route.get("tree_mbps"),
                "control": self.poll_route if self._watcher else None, "return_stats": True,
                "link_mbps": self.seat.link_mbps, "on_progress": self.block_progress, "ready": self.ready}


def rank_program(description: str, input_help: str, body, argv: list[str] | None = None) -> int:
    """Entry point shared by the programs the session starts in hosts
    (`python -m MODULE run.json RANK INPUT`): body(comm, input_path) returns the report's
    fields; errors are reported by rank with the reason, in <out>.json like hosts/worker.py."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("plan", help="run.json written by the session (ground/runspec.py RunPlan)")
    ap.add_argument("rank", type=int)
    ap.add_argument("input", help=input_help)
    args = ap.parse_args(argv)
    as_batch_work()             # as hosts/worker.py: a woken rank never preempts a switch,
    set_timer_slack()           # and its pacer wakes on time (ground/timerslack.py)
    plan = RunPlan.read(args.plan)
    report: dict = {"rank": args.rank, "ok": False}
    try:
        report.update(body(Communicator(plan, args.rank), args.input), ok=True)
    except Exception as exc:  # reported to the parent by rank, with the reason
        report.update(error=f"{type(exc).__name__}: {exc}", traceback=traceback.format_exc())
    with open(plan.seats[args.rank].out + ".json", "w") as f:
        json.dump(report, f)
    return 0 if report["ok"] else 1
