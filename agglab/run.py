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
from dataclasses import dataclass, field, replace

import numpy as np

from agglab import wire
from agglab.paths import REPO
from agglab.failures import FailSpec, FailureInjector
from controller import aggregate, drop_sim, forward, topologies
from controller.addressing import SERVICE_IP
from controller.events import EventLog
from controller.bml_job import BmlJob
from controller.job import TreeJob
from controller.network import EmulatedNetwork
from controller.topology import single_switch, switches, workers as worker_hosts
from hosts.workload import expected_sum, make_gradient


@dataclass
class RunSpec:
    workers: int = 4
    elements: int = 100_000
    dtype: str = "int32"
    loss: float = 0.0
    backend: str = "soft"
    window: int | None = None
    seed: int = 0
    give_up: float = 10.0
    job: int = 0
    bw: float | None = None            # Mb/s per link (tc htb), None = unlimited
    topology: str = "single"           # single | leafspine | fattree | bcube | FILE.yaml
    k: int | None = None               # fat-tree k / BCube k
    tree: str = "spt"                  # spt | rat | packing | bml (BCube only)
    bml_variant: str = "in-network"    # in-network | host
    algorithm: str = "switchml"        # switchml (dense) | omnireduce (block-sparse)
    density: float = 1.0               # omnireduce: fraction of non-zero blocks
    pattern: str = "random"            # omnireduce: random | overlap | disjoint
    block_size: int | None = None      # omnireduce: values per block (multiple of K)
    zero_workers: int = 0              # omnireduce: ranks 0..Z-1 have no non-zero block
    fail: list = field(default_factory=list)    # ["A-B@0.5", "tree@0.5", ...]
    length_override: dict[int, int] = field(default_factory=dict)   # rank -> length (tests)

    @property
    def sparse_data(self) -> bool:
        """Block-sparse inputs: for omnireduce, or for the dense pipeline on the same data."""
        return self.algorithm == "omnireduce" or self.density < 1.0

    def validate(self) -> None:
        if not 1 <= self.workers <= 1024:
            raise ValueError(f"--workers must be positive, got {self.workers}")
        if self.elements < 1:
            raise ValueError(f"--elements must be positive, got {self.elements}")
        if self.dtype not in ("int32", "float32"):
            raise ValueError(f"--dtype must be int32 or float32, got {self.dtype!r}")
        drop_sim.threshold(self.loss)   # raises on a bad probability
        if self.window is not None and not 1 <= self.window <= wire.SLOTS:
            raise ValueError(f"--window must be within 1..{wire.SLOTS}, got {self.window}")
        if self.tree not in ("spt", "rat", "packing", "bml"):
            raise ValueError(f"--tree must be spt, rat, packing or bml, got {self.tree!r}")
        if (self.tree == "bml") != (self.topology == "bcube"):
            raise ValueError("--tree bml goes with --topology bcube (and BCube needs --tree bml: "
                             "its servers relay, so no switch tree spans it)")
        if self.algorithm not in ("switchml", "omnireduce"):
            raise ValueError(f"--algorithm must be switchml or omnireduce, got {self.algorithm!r}")
        if not 0.0 <= self.density <= 1.0:
            raise ValueError(f"--density must be within [0, 1], got {self.density}")
        if self.pattern not in ("random", "overlap", "disjoint"):
            raise ValueError(f"--pattern must be random, overlap or disjoint, got {self.pattern!r}")
        if self.block_size is not None and (self.block_size < wire.K or self.block_size % wire.K):
            raise ValueError(f"--block-size must be a positive multiple of K={wire.K}, got {self.block_size}")
        if not 0 <= self.zero_workers <= self.workers:
            raise ValueError(f"--zero-workers must be within 0..{self.workers} (the workers), got {self.zero_workers}")
        if self.zero_workers and not self.sparse_data:
            raise ValueError("--zero-workers goes with block-sparse data (--algorithm omnireduce or --density < 1)")
        if self.algorithm == "omnireduce" and self.tree == "bml":
            raise ValueError("--algorithm omnireduce runs on switch trees (spt, rat, packing), not BML")
        if self.bml_variant not in ("in-network", "host"):
            raise ValueError(f"--bml-variant must be in-network or host, got {self.bml_variant!r}")
        self.fail_specs = [FailSpec.parse(f) for f in self.fail]


def _log(msg: str, quiet: bool) -> None:
    if not quiet:
        print(f"[agglab] {msg}", file=sys.stderr, flush=True)


def build_graph(spec: RunSpec):
    if spec.topology == "single":
        if spec.workers > wire.MAX_WORKERS:
            raise ValueError(f"one switch aggregates at most {wire.MAX_WORKERS} workers")
        return single_switch(spec.workers, bw=spec.bw)
    kw = {"workers": spec.workers}
    if spec.topology == "fattree":
        kw.update(k=spec.k or 4, bw=spec.bw)
    elif spec.topology == "bcube":
        kw.update(k=spec.k if spec.k is not None else 1, bw=spec.bw)
    elif spec.topology == "leafspine":
        kw.update(host_bw=spec.bw)
    try:
        return topologies.build(spec.topology, **kw)
    except topologies.TopologyError as exc:
        raise ValueError(str(exc)) from exc


def default_window(spec: RunSpec) -> int:
    blocks = -(-spec.elements // wire.K)
    return max(1, min(spec.window or 128, blocks, wire.SLOTS))


def run_allreduce(quiet: bool = True, **kwargs) -> dict:
    """Run one allreduce described by RunSpec(**kwargs) in a fresh network and return the result."""
    spec = RunSpec(**kwargs)
    spec.validate()
    with Session(spec, quiet=quiet) as session:
        result = session.allreduce()
        result["events"] = session.events.lines()
        return result


class Session:
    """A running network with forwarding, loss and one aggregation job (TreeJob).

    `agglab allreduce` uses one per run; the interactive lab keeps one open and runs
    many allreduces on it while links fail and recover.
    """

    def __init__(self, spec: RunSpec, quiet: bool = True, echo=None):
        spec.validate()
        self.spec, self.quiet = spec, quiet
        self.g = build_graph(spec)
        for f in spec.fail_specs:
            f.check(self.g)
        self.net = EmulatedNetwork(self.g, backend=spec.backend, seed=spec.seed)
        self.events = EventLog(echo=echo or (None if quiet else (lambda line: _log(line, False))))
        self.job: TreeJob | None = None
        self.runs = 0

    def start(self) -> "Session":
        spec, g = self.spec, self.g
        n_sw = len(switches(g))
        _log(f"building network: {spec.topology} ({n_sw} switch{'es' if n_sw > 1 else ''}, {spec.backend}), "
             f"{spec.workers} workers", self.quiet)
        self.net.start()
        try:
            for sw in switches(g):
                client = self.net.client(sw)
                forward.install_forwarding(client, g, sw)
                drop_sim.set_loss(client, [e["ports"][sw] for _, _, e in g.edges(sw, data=True)], spec.loss)
            if spec.tree == "bml":
                self.job = BmlJob(g, self.net.clients, default_window(spec), self.net.run.path / "epoch.json",
                                  job=spec.job, events=self.events, variant=spec.bml_variant).start()
            else:
                self.job = TreeJob(g, self.net.clients, spec.tree, worker_hosts(g), default_window(spec),
                                   self.net.run.path / "epoch.json", job=spec.job, events=self.events).start()
            self.job.watch_links()
        except BaseException:
            self.stop()
            raise
        return self

    def allreduce(self, **overrides) -> dict:
        spec = replace(self.spec, **overrides) if overrides else self.spec
        spec.validate()
        for f in spec.fail_specs:
            f.check(self.g)
        self.job.prepare(default_window(spec))
        self.runs += 1
        with self.job.lock:
            before = _switch_stats(self.net, self.g)
        _log(f"allreduce of {spec.elements} {spec.dtype} per worker on {len(self.job.treeset.trees)} "
             f"{spec.tree} tree(s), loss {spec.loss}", self.quiet)
        self.job.busy = True
        try:
            reports, injector = _run_workers(self.net, spec, self.job, self.quiet, f"run{self.runs}")
        finally:
            self.job.busy = False
        self.net.check_switches()
        with self.job.lock:            # a reroute may still be tidying up on the same sockets
            after = _switch_stats(self.net, self.g)
        result = _check(spec, reports, {k: after[k] - before.get(k, 0) for k in after})
        result.update(topology=spec.topology, tree=spec.tree, trees=len(self.job.treeset.trees),
                      epoch=self.job.treeset.epoch, failures=injector.report() if injector else [])
        return result

    def stop(self) -> None:
        if self.job:
            self.job.stop()
        self.net.stop()

    def __enter__(self) -> "Session":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def _switch_stats(net: EmulatedNetwork, g) -> dict:
    total: dict[str, int] = {}
    for sw in switches(g):
        for key, value in aggregate.read_stats(net.client(sw)).items():
            total[key] = total.get(key, 0) + value
    return total


def _run_workers(net: EmulatedNetwork, spec: RunSpec, job: TreeJob, quiet: bool, name: str):
    workers = job.workers
    out_dir = net.run.path / name
    out_dir.mkdir()
    env = dict(os.environ, PYTHONPATH=str(REPO))
    plans = job.write_plans(out_dir) if isinstance(job, BmlJob) else {}
    procs = []
    for rank, h in enumerate(workers):
        argv = [sys.executable, "-m", "hosts.worker", "--rank", str(rank), "--workers", str(spec.workers),
                "--elements", str(spec.elements), "--dtype", spec.dtype, "--seed", str(spec.seed),
                "--local-ip", net.graph.nodes[h]["ip"], "--service-ip", SERVICE_IP,
                "--job", str(spec.job), "--give-up", str(spec.give_up), "--out", str(out_dir / f"rank{rank}"),
                "--window", str(job.window), "--epoch-file", str(job.epoch_file),
                "--progress", str(out_dir / f"rank{rank}.progress")]
        if h in plans:
            argv += ["--bml-plan", str(plans[h])]
        if spec.sparse_data:
            argv += ["--algorithm", spec.algorithm, "--density", str(spec.density), "--pattern", spec.pattern,
                     "--block-size", str(spec.block_size or wire.K), "--zero-workers", str(spec.zero_workers)]
        if rank in spec.length_override:
            argv += ["--length-override", str(spec.length_override[rank])]
        log = open(out_dir / f"rank{rank}.log", "wb")
        proc = net.host(h).popen(argv, stdout=log, stderr=log, cwd=str(REPO), env=env)
        net.run.add_pid(proc.pid, f"worker {rank} on {h}")
        procs.append((rank, proc, log))
    injector = None
    if spec.fail_specs:
        injector = FailureInjector(net, job, spec.fail_specs,
                                   [out_dir / f"rank{r}.progress" for r in range(len(workers))], spec.seed)
        injector.start()
    deadline = time.monotonic() + spec.give_up * 3 + 30 + spec.elements * spec.workers / 50_000
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
        if reports[-1].get("ok"):
            reports[-1]["result"] = np.load(out_dir / f"rank{rank}.npy")
    if injector:
        injector.stop()
        injector.join(1)
    return reports, injector


def float32_error_bound(inputs: list[np.ndarray]) -> np.ndarray:
    """Per-element bound for float32 results: the agreed exponent of each block is the
    max over workers, and hosts.quantization.error_bound(e, n) bounds that block."""
    from hosts.quantization import biased_exponents, error_bound

    n, length = len(inputs), len(inputs[0])
    blocks = -(-length // wire.K)
    padded = np.zeros((n, blocks * wire.K), dtype=np.float32)
    for i, x in enumerate(inputs):
        padded[i, :length] = x
    agreed = np.max([biased_exponents(p.reshape(blocks, wire.K)) for p in padded], axis=0)
    per_block = np.array([error_bound(None if b == 0 else int(b) - wire.EXP_BIAS, n) for b in agreed])
    return np.repeat(per_block, wire.K)[:length]


def _check(spec: RunSpec, reports: list[dict], switch_stats: dict) -> dict:
    errors = [f"rank {r['rank']}: {r['error']}" for r in reports if not r.get("ok")]
    result = {
        "ok": not errors, "exact": False, "backend": spec.backend, "workers": spec.workers,
        "elements": spec.elements, "dtype": spec.dtype, "loss": spec.loss,
        "seconds": None, "goodput_mbps": None, "packets": None, "retransmissions": None,
        "max_abs_error": None, "error_bound": None, "switch": switch_stats,
    }
    if errors:
        result["errors"] = errors
        return result
    seconds = max(r["seconds"] for r in reports)
    if spec.sparse_data:
        from hosts.sparse_workload import expected_sparse_sum, sparse_gradient

        args = (spec.density, spec.pattern, spec.block_size or wire.K, spec.seed, spec.zero_workers)
        expected = expected_sparse_sum(spec.workers, spec.elements, spec.dtype, *args)
        make = lambda r: sparse_gradient(r, spec.elements, spec.dtype, *args)  # noqa: E731
    else:
        expected = expected_sum(spec.workers, spec.elements, spec.dtype, spec.seed)
        make = lambda r: make_gradient(r, spec.elements, spec.dtype, spec.seed)  # noqa: E731
    worst, exact, bound = 0.0, True, 0.0
    if spec.dtype == "float32":
        inputs = [make(r) for r in range(spec.workers)]
        bound_vec = float32_error_bound(inputs)
        bound = float(bound_vec.max())
    for r in reports:
        got = r.pop("result")
        if got.shape != expected.shape:
            exact = False
            worst = float("inf")
            continue
        if spec.dtype == "int32":
            diff = np.abs(got.astype(np.int64) - expected.astype(np.int64))
            exact &= bool(np.array_equal(got, expected))
        else:
            diff = np.abs(got.astype(np.float64) - expected)
            exact &= bool(np.all(diff <= bound_vec))
        worst = max(worst, float(diff.max()))
    result.update(
        exact=exact, ok=exact, seconds=round(seconds, 4),
        goodput_mbps=round(spec.elements * 4 * 8 / seconds / 1e6, 2),
        packets=sum(r["packets_sent"] for r in reports),
        retransmissions=sum(r["retransmissions"] for r in reports),
        duplicates_ignored=sum(r.get("duplicates_ignored", 0) for r in reports),
        algorithm=spec.algorithm,
        **({"density": spec.density, "pattern": spec.pattern, "zero_workers": spec.zero_workers,
            "blocks_sent": sum(r.get("blocks_sent", 0) for r in reports)} if spec.algorithm == "omnireduce" else {}),
        max_abs_error=worst, error_bound=bound,
    )
    return result
