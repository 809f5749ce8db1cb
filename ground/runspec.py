"""The run description: one object that says what a run is, shared by every layer.

Why one object: the CLI, the lab, the experiments, the benchmarks and the worker
processes all need the same facts (topology, workers, data, algorithm, failures...).
Each builds a RunSpec, `validate()` checks it once with one clear message per bad
field, and the workers receive it as JSON (`RunPlan`), so no layer restates argv or
the rules that derive a worker's gradient from it.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path

from agglab.ground import host_tcp, wire
from agglab.ground.schemes import DEFAULT as DEFAULT_SCHEME, DEFAULT_WINDOW, HOST_BASELINES, IN_NETWORK, SPARSE_WINDOW, SCHEMES, scheme

# The built-in topologies and the tree algorithms. The controller holds them (the table
# controller/topologies.py TOPOLOGIES; one module per algorithm in controller/trees/) and
# registers their names here with `register_topologies` and `register_trees`, because the
# ground layer cannot import the controller; until then any identifier passes the check
# (a topology file, FILE.yaml, always does).
TOPOLOGIES: list[str] = []
TREES: list[str] = []
BCUBE_TREE = "bml"                       # BCube's stage schedule: the one tree for --topology bcube


def register_topologies(names) -> None:
    """The controller's built-in topologies (controller/topologies.py)."""
    TOPOLOGIES[:] = list(names)


def register_trees(names) -> None:
    """The controller's discovered tree algorithms (controller/trees/__init__.py)."""
    TREES[:] = list(names)


def switch_trees() -> str:
    """The tree algorithms that span switches, for messages: 'spt, rat, packing'."""
    return ", ".join(t for t in TREES if t != BCUBE_TREE) or "spt"
PATTERNS = ("random", "overlap", "disjoint")
PS_LAYOUTS = ("sharded", "central")                      # --algorithm ps: who serves which shard (hosts/ps.py)
PLACEMENTS = ("spread", "packed")                      # where a --jobs run puts each job's workers
ATP_PS = ("colocated", "separate")                      # --algorithm atp: rank 0's host also a worker, or a server only
DTYPES = ("int32", "float32")
BACKENDS = ("soft", "bmv2")
MAX_JOBS = 16                                            # concurrent jobs: AGG_SLOTS / 16 = 64 slots each

_FAIL = re.compile(r"^(?:(?P<tree>tree)|(?P<a>[\w.]+)-(?P<b>[\w.]+))@(?P<at>[0-9.]+)$")
_FAIL_SWITCH = re.compile(r"^(?P<name>[\w.]+)@(?P<at>[0-9]*\.?[0-9]+)$")


@dataclass(frozen=True)
class FailSpec:
    """One scripted link failure: `A-B@0.5` or `tree@0.5` (a link an active tree uses),
    at a fraction of the blocks done (progress-triggered, so it lands mid-run at any speed)."""
    at: float                      # fraction of blocks done, 0..1
    link: tuple[str, str] | None   # None: a link the active tree uses

    @classmethod
    def parse(cls, text: str) -> "FailSpec":
        m = _FAIL.match(text.strip())
        if not m or not 0 <= float(m["at"]) <= 1:
            raise ValueError(f"--fail {text!r}: expected A-B@FRACTION or tree@FRACTION, e.g. e1-a1@0.5")
        return cls(float(m["at"]), None if m["tree"] else (m["a"], m["b"]))

    def check(self, g) -> None:
        """Refuse a named link that the topology graph does not have."""
        if self.link and not g.has_edge(*self.link):
            raise ValueError(f"--fail: there is no link {self.link[0]}-{self.link[1]} in this topology")


def only_edge_switches(g) -> set[str]:
    """Switches that are some worker's only switch: failing one cuts that worker off."""
    out = set()
    for n, d in g.nodes(data=True):
        if d.get("kind") == "host" and d.get("rank") is not None:
            sws = [m for m in g.neighbors(n) if g.nodes[m].get("kind") == "switch"]
            if len(sws) == 1:
                out.add(sws[0])
    return out


@dataclass(frozen=True)
class SwitchFailSpec:
    """One scripted switch failure: `a1@0.5` (kill switch a1's process when half the blocks
    are done) or `tree@0.5` (an aggregating switch of the active tree that is not some
    worker's only edge switch, so the allreduce can go on around it)."""
    at: float                      # fraction of blocks done, 0..1
    switch: str | None             # None: picked on the active tree
    hang: bool = False             # --hang-switch: SIGSTOP the process instead (the liveness probe's case)

    @classmethod
    def parse(cls, text: str, hang: bool = False) -> "SwitchFailSpec":
        opt = "--hang-switch" if hang else "--fail-switch"
        m = _FAIL_SWITCH.match(text.strip())
        if not m:
            raise ValueError(f"{opt} {text!r}: expected NAME@FRACTION or tree@FRACTION, e.g. a1@0.5")
        at = float(m["at"])
        if not 0 <= at <= 1:
            raise ValueError(f"{opt} {text!r}: the fraction must be within 0..1, got {m['at']}")
        return cls(at, None if m["name"] == "tree" else m["name"], hang)

    def check(self, g) -> None:
        """Refuse a name that is not a switch of the topology, and `tree@F` where every
        switch is some worker's only edge switch (no failure the job could survive)."""
        if self.switch is not None:
            if self.switch not in g or g.nodes[self.switch].get("kind") != "switch":
                names = sorted((n for n, d in g.nodes(data=True) if d.get("kind") == "switch"),
                               key=lambda n: (len(n), n))
                raise ValueError(f"{'--hang-switch' if self.hang else '--fail-switch'}: there is no switch "
                                 f"{self.switch!r} in this topology "
                                 f"(switches: {', '.join(names[:12])}{' ...' if len(names) > 12 else ''})")
            return
        edge_only = only_edge_switches(g)
        if all(n in edge_only for n, d in g.nodes(data=True) if d.get("kind") == "switch"):
            raise ValueError("--fail-switch tree@F: every switch of this topology is some worker's only "
                             "edge switch, so any switch failure partitions the workers; name one "
                             "(NAME@F) to test the partition")


__all__ = ["DEFAULT_WINDOW", "HOST_BASELINES", "IN_NETWORK", "SPARSE_WINDOW", "RunPlan",
           "RunSpec", "FailSpec", "SwitchFailSpec", "WorkerSeat"]


@dataclass
class RunSpec:
    workers: int = 4
    elements: int = 100_000
    dtype: str = "int32"
    loss: float = 0.0                  # drop probability per packet and direction (switch drop simulator)
    backend: str = "soft"
    window: int | None = None          # outstanding slots per worker
    seed: int = 0
    give_up: float = 10.0              # seconds without progress before a worker gives up
    job: int = 0
    bw: float | None = None            # Mb/s per link (tc htb), None = unlimited
    topology: str = "single"           # single | leafspine | fattree | bcube | FILE.yaml
    k: int | None = None               # fat-tree k / BCube k
    tree: str = "spt"                  # spt | rat | packing | bml (BCube only)
    bml_variant: str = "in-network"    # in-network | host
    algorithm: str = DEFAULT_SCHEME    # a scheme of ground/schemes.py
    density: float = 1.0               # fraction of non-zero blocks (block-sparse data)
    pattern: str = "random"            # block-sparse data: random | overlap | disjoint
    block_size: int | None = None      # omnireduce: values per block (multiple of K)
    zero_workers: int = 0              # block-sparse data: ranks 0..Z-1 have no non-zero block
    fail: list[str] = field(default_factory=list)    # ["A-B@0.5", "tree@0.5", ...]
    fail_switch: list[str] = field(default_factory=list)   # ["a1@0.5", "tree@0.5", ...]: kill switches
    hang_switch: list[str] = field(default_factory=list)   # the same syntax: SIGSTOP switches (hung, not dead)
    chaos: int | None = None           # a seeded fault schedule (emulation/chaos.py): its seed
    length_override: dict[int, int] = field(default_factory=dict)   # rank -> length (tests)
    jobs: int = 1                      # concurrent allreduces (tenants) of `workers` each, ids job, job+1, ...
    job_loss: list[float] = field(default_factory=list)   # per job: loss on its workers' links (else `loss`)
    placement: str = "spread"          # with jobs: spread (a job across racks) | packed (a job fills racks)
    ps_layout: str = "sharded"         # algorithm ps: sharded over the workers | central (rank 0's host serves all)
    # algorithm atp (the others ignore them, as they do ps_layout: a trend's series share its run keys):
    atp_multicast: bool = False        # the PS's ToR multicasts each result (else the PS unicasts it to every worker)
    atp_ps: str = "colocated"          # rank 0's host is a worker too | separate (a server, no gradient)
    # a scarce pool (ATP's setting): ATP's jobs hash into this many aggregators per switch, and the
    # partitioned schemes' jobs split the same number of slots evenly (SwitchML's static partitions)
    atp_pool_slots: int | None = None
    # jobs that train (emulation/training_jobs.py): iterations of compute, then the allreduce
    iterations: int = 1                # allreduces per job, each after one iteration's compute
    compute_ms: float | None = None    # emulated compute per iteration (ms), or from compute_profile
    compute_profile: str | None = None  # a PACE profile (pace/profiles) scaled to the link: the compute
    job_offsets: list[float] = field(default_factory=list)   # per job: seconds before its first iteration
    tenant: int = 0                    # which of the `jobs` this spec is (set by the session, not an option)
    keep: str | None = None            # copy the run directory here when the run ends (logs, commands, pcaps)
    pcap: bool = False                 # the switches write per-port pcaps into the kept directory
    cluster: str | None = None         # a cluster file: the network runs on its servers (emulation/cluster)
    tcp_cc: str = host_tcp.DEFAULT_CC  # the hosts' TCP congestion control (ground/host_tcp.py pins it)

    # -- derived -------------------------------------------------------------------
    @property
    def sparse_data(self) -> bool:
        """Block-sparse inputs: for omnireduce, or for the dense pipeline on the same data."""
        known = SCHEMES.get(self.algorithm)
        return bool(known and known.sparse) or self.density < 1.0

    @property
    def result_multicast(self) -> bool:
        """--atp-multicast for a scheme whose PS returns results (the pool schemes): its PS sends
        each result once and the PS's ToR replicates it. A property, not the field, in the scheme
        modules, so a copy of ATP renamed (tests/test_scheme_discovery.py) still reads it."""
        known = SCHEMES.get(self.algorithm)
        return bool(self.atp_multicast and known and known.shares_pool)

    @property
    def ps_only(self) -> bool:
        """Rank 0 is ATP's parameter server on a host of its own (--atp-ps separate): a server,
        not a worker, so its input is zeros and the job's gradient is the other ranks' sum."""
        return self.algorithm == "atp" and self.atp_ps == "separate"

    @property
    def on_trees(self) -> bool:
        """The switches aggregate along the controller's trees (not the hosts, not BML's
        schedule, not a pool shared best-effort along IP routes)."""
        known = SCHEMES.get(self.algorithm)
        return bool(known and known.in_network and not known.shares_pool) and self.tree != BCUBE_TREE

    @property
    def shares_pool(self) -> bool:
        """Tenants share one aggregator pool best effort along IP routes (ATP)."""
        known = SCHEMES.get(self.algorithm)
        return bool(known and known.shares_pool)

    @property
    def host_baseline(self) -> bool:
        """Hosts sum over TCP (ring, ps); the switches only forward IP."""
        return self.algorithm in HOST_BASELINES

    @property
    def blocks(self) -> int:
        return self.block_size or wire.K

    @property
    def fail_specs(self) -> list[FailSpec]:
        return [FailSpec.parse(f) for f in self.fail]

    @property
    def fail_switch_specs(self) -> list[SwitchFailSpec]:
        """Every scripted switch failure: kills (--fail-switch), then hangs (--hang-switch)."""
        return ([SwitchFailSpec.parse(f) for f in self.fail_switch]
                + [SwitchFailSpec.parse(f, hang=True) for f in self.hang_switch])

    @property
    def hosts(self) -> int:
        """Worker hosts the run needs: `workers` for each of the `jobs`."""
        return self.workers * self.jobs

    @property
    def slots_per_job(self) -> int:
        """Each job owns this many switch slots (a disjoint range per job): the switch's slots,
        or with --atp-pool-slots P the pool's P split evenly (P // jobs)."""
        return (self.atp_pool_slots or wire.SLOTS) // self.jobs

    @property
    def training(self) -> bool:
        """Jobs that train: more than one iteration, or compute between allreduces."""
        return self.iterations > 1 or bool(self.compute_ms) or self.compute_profile is not None

    def offset_of(self, tenant: int) -> float:
        """Seconds job `tenant` (0..jobs-1) waits before its first iteration (--job-offsets: one
        offset per job, or a single step T: job j starts at j x T, whatever the jobs)."""
        if not self.job_offsets:
            return 0.0
        return self.job_offsets[0] * tenant if len(self.job_offsets) == 1 else self.job_offsets[tenant]

    def loss_of(self, job: int) -> float:
        """The loss on job `job`'s worker links (index 0..jobs-1)."""
        return self.job_loss[job] if self.job_loss else self.loss

    def default_window(self) -> int:
        """Outstanding slots per worker: the asked window (else the scheme's default,
        ground/schemes.py), at most the blocks and the job's slots."""
        blocks = -(-self.elements // wire.K)
        row = SCHEMES[self.algorithm]
        limit = blocks if row.shares_pool else min(blocks, self.slots_per_job)   # a pool is not partitioned
        return max(1, min(self.window or row.window, limit))

    def elements_of(self, rank: int) -> int:
        return self.length_override.get(rank, self.elements)

    # -- checks --------------------------------------------------------------------
    def validate(self) -> "RunSpec":
        """Raise ValueError with one line naming the option for the first bad field."""
        if not 1 <= self.workers <= 1024:
            raise ValueError(f"--workers must be within 1..1024, got {self.workers}")
        if self.elements < 1:
            raise ValueError(f"--elements must be positive, got {self.elements}")
        if self.dtype not in DTYPES:
            raise ValueError(f"--dtype must be int32 or float32, got {self.dtype!r}")
        if not 0.0 <= self.loss <= 1.0:
            raise ValueError(f"--loss must be a probability within [0, 1], got {self.loss}")
        if self.backend not in BACKENDS:
            raise ValueError(f"--backend must be soft or bmv2, got {self.backend!r}")
        if self.window is not None and not 1 <= self.window <= wire.SLOTS:
            raise ValueError(f"--window must be within 1..{wire.SLOTS}, got {self.window}")
        if self.bw is not None and not (0 < self.bw < math.inf):
            raise ValueError(f"--bw must be a positive rate in Mb/s, got {self.bw}")
        if not 0 < self.give_up < math.inf:
            raise ValueError(f"--give-up must be positive seconds, got {self.give_up}")
        if self.k is not None and self.k < 0:
            raise ValueError(f"--k must be a non-negative integer, got {self.k}")
        for name, seed in (("--seed", self.seed), ("--chaos", self.chaos)):
            if seed is not None and not 0 <= seed < 2 ** 32:      # numpy's and the switches' seeds
                raise ValueError(f"{name} must be within 0..{2 ** 32 - 1}, got {seed}")
        named = not self.topology.endswith((".yaml", ".yml"))      # else a topology file
        if named and (not re.fullmatch(r"[a-z_][a-z0-9_]*", self.topology)
                      or (TOPOLOGIES and self.topology not in TOPOLOGIES)):
            raise ValueError(f"--topology must be one of {', '.join(TOPOLOGIES) or 'the built-in topologies'} "
                             f"or a .yaml file, got {self.topology!r}")
        if not re.fullmatch(r"[a-z_][a-z0-9_]*", self.tree) or (TREES and self.tree not in TREES):
            raise ValueError(f"--tree must be one of {', '.join(TREES) or 'the tree algorithms'}, got {self.tree!r}")
        if (self.host_baseline or self.shares_pool) and self.topology == "bcube":
            raise ValueError(f"--algorithm {self.algorithm} runs between single-NIC hosts over IP routes; "
                             "BCube's servers have several NICs and relay: "
                             + ("aggregate on a switch topology (fattree, leafspine, single)" if self.shares_pool
                                else "use --tree bml --bml-variant host"))
        if (self.tree == "bml") != (self.topology == "bcube"):
            raise ValueError("--tree bml goes with --topology bcube (and BCube needs --tree bml: "
                             "its servers relay, so no switch tree spans it)")
        row = scheme(self.algorithm)     # ValueError naming the schemes
        if self.dtype not in row.dtypes:
            raise ValueError(f"--algorithm {self.algorithm} sums {' or '.join(row.dtypes)} only, "
                             f"got --dtype {self.dtype}")
        if not 0.0 <= self.density <= 1.0:
            raise ValueError(f"--density must be within [0, 1], got {self.density}")
        if self.pattern not in PATTERNS:
            raise ValueError(f"--pattern must be random, overlap or disjoint, got {self.pattern!r}")
        if self.block_size is not None and (self.block_size < wire.K or self.block_size % wire.K):
            raise ValueError(f"--block-size must be a positive multiple of K={wire.K}, got {self.block_size}")
        if not 0 <= self.zero_workers <= self.workers:
            raise ValueError(f"--zero-workers must be within 0..{self.workers} (the workers), got {self.zero_workers}")
        if self.zero_workers and not self.sparse_data:
            sparse = [n for n, s in SCHEMES.items() if s.sparse]
            raise ValueError(f"--zero-workers goes with block-sparse data (--algorithm {' or '.join(sparse)} "
                             "or --density < 1)")
        if self.algorithm in SCHEMES and SCHEMES[self.algorithm].sparse and self.tree == "bml":
            raise ValueError(f"--algorithm {self.algorithm} runs on switch trees ({switch_trees()}), not BML")
        if (self.fail or self.fail_switch) and self.tree == "bml" and self.bml_variant == "host":
            raise ValueError("--fail/--fail-switch: BML's host variant does not re-plan its schedule; "
                             "fail links or switches with --bml-variant in-network")
        if self.chaos is not None and not self.on_trees:
            raise ValueError("--chaos: the drawn faults (flaps, kills, hangs, loss bursts) are recovered by "
                             f"the tree jobs: use an in-network scheme on a switch tree ({switch_trees()})")
        if self.chaos is not None and (self.fail or self.fail_switch or self.hang_switch):
            raise ValueError("--chaos draws its own faults: leave out --fail, --fail-switch and --hang-switch")
        if self.hang_switch and self.tree == "bml":
            raise ValueError("--hang-switch: a hung switch is rerouted around like a killed one, which needs "
                             f"jobs on a switch tree ({switch_trees()})")
        if (self.host_baseline or self.shares_pool) and self.tree != "spt":
            raise ValueError(f"--algorithm {self.algorithm} sends along IP shortest paths: "
                             f"--tree {self.tree} (aggregation trees"
                             + (", BCube" if self.tree == "bml" else "") + ") does not apply; leave --tree at spt")
        if self.bml_variant not in ("in-network", "host"):
            raise ValueError(f"--bml-variant must be in-network or host, got {self.bml_variant!r}")
        if not 1 <= self.jobs <= MAX_JOBS:
            raise ValueError(f"--jobs must be within 1..{MAX_JOBS}, got {self.jobs}")
        if self.jobs > 1:
            if self.algorithm not in IN_NETWORK or self.tree == "bml":
                raise ValueError(f"--jobs {self.jobs}: concurrent jobs share the switches' slots; they run the "
                                 f"in-network pipelines on switch trees ({' or '.join(IN_NETWORK)}, "
                                 f"{switch_trees()})")
            if self.window is not None and self.window > self.slots_per_job and not self.shares_pool:
                raise ValueError(f"--window {self.window}: with --jobs {self.jobs} each job owns "
                                 f"{self.slots_per_job} slots; use --window <= {self.slots_per_job}")
            if self.job + self.jobs - 1 > 255:
                raise ValueError(f"--job {self.job} --jobs {self.jobs}: job ids must fit in 8 bits (<= 255)")
        self._check_pool_and_training()
        if self.ps_layout not in PS_LAYOUTS:
            raise ValueError(f"--ps-layout must be sharded or central, got {self.ps_layout!r}")
        if self.placement not in PLACEMENTS:
            raise ValueError(f"--placement must be spread or packed, got {self.placement!r}")
        if self.tcp_cc not in host_tcp.CONGESTION_CONTROLS:
            raise ValueError(f"--tcp-cc must be one of {', '.join(host_tcp.CONGESTION_CONTROLS)}, got {self.tcp_cc!r}")
        if self.atp_ps not in ATP_PS:
            raise ValueError(f"--atp-ps must be colocated or separate, got {self.atp_ps!r}")
        if self.ps_only and self.workers < 2:
            raise ValueError("--atp-ps separate: rank 0's host is the PS alone, so a job needs --workers >= 2")
        if self.job_loss:
            if len(self.job_loss) != self.jobs:
                raise ValueError(f"--job-loss needs one probability per job ({self.jobs}), got {len(self.job_loss)}")
            bad = [p for p in self.job_loss if not 0.0 <= p <= 1.0]
            if bad:
                raise ValueError(f"--job-loss must be probabilities within [0, 1], got {bad[0]}")
        if self.pcap and not self.keep:
            raise ValueError("--pcap writes per-port pcaps into the kept run directory: give --keep DIR too")
        self.fail_specs   # noqa: B018 (parses every --fail, raising on a bad one)
        self.fail_switch_specs   # noqa: B018 (and every --fail-switch)
        return self

    def _check_pool_and_training(self) -> None:
        """--atp-pool-slots, --iterations, --compute-ms/--compute-profile, --job-offsets."""
        pool = wire.CONST["ATP_POOL"]
        if self.atp_pool_slots is not None:
            if not self.jobs <= self.atp_pool_slots <= pool:
                raise ValueError(f"--atp-pool-slots must be within {self.jobs}..{pool} (at least a slot per job, "
                                 f"at most ATP_POOL), got {self.atp_pool_slots}")
            if self.window is not None and self.window > self.slots_per_job and not self.shares_pool:
                raise ValueError(f"--window {self.window}: --atp-pool-slots {self.atp_pool_slots} split among "
                                 f"{self.jobs} jobs gives each {self.slots_per_job} slots; use --window <= "
                                 f"{self.slots_per_job}")
        if not 1 <= self.iterations <= 100_000:
            raise ValueError(f"--iterations must be within 1..100000, got {self.iterations}")
        if self.compute_ms is not None and not 0 <= self.compute_ms < math.inf:
            raise ValueError(f"--compute-ms must be non-negative milliseconds, got {self.compute_ms}")
        if self.compute_ms is not None and self.compute_profile is not None:
            raise ValueError("--compute-ms and --compute-profile both set the compute per iteration: give one")
        if self.compute_profile is not None and self.bw is None:
            raise ValueError("--compute-profile scales the profile's compute to the link: give --bw too")
        if self.job_offsets:
            if len(self.job_offsets) not in (1, self.jobs):
                raise ValueError(f"--job-offsets needs one offset per job ({self.jobs}) or one step, "
                                 f"got {len(self.job_offsets)}")
            if any(not 0 <= t < math.inf for t in self.job_offsets):
                raise ValueError(f"--job-offsets must be non-negative seconds, got {self.job_offsets}")
        if not 0 <= self.tenant < self.jobs:
            raise ValueError(f"tenant {self.tenant} is not one of the {self.jobs} jobs")

    # -- JSON ----------------------------------------------------------------------
    def to_dict(self) -> dict:
        d = asdict(self)
        d["length_override"] = {str(r): n for r, n in self.length_override.items()}
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "RunSpec":
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ValueError(f"unknown run field(s): {', '.join(unknown)} (known: {', '.join(sorted(known))})")
        d = dict(d)
        d["length_override"] = {int(r): int(n) for r, n in d.get("length_override", {}).items()}
        d["fail"] = list(d.get("fail", []))
        d["fail_switch"] = list(d.get("fail_switch", []))
        d["hang_switch"] = list(d.get("hang_switch", []))
        d["job_loss"] = [float(p) for p in d.get("job_loss", [])]
        d["job_offsets"] = [float(t) for t in d.get("job_offsets", [])]
        return cls(**d)

    def with_(self, **changes) -> "RunSpec":
        """A validated copy with some fields changed (a sweep point, a lab command)."""
        return replace(self, **changes).validate()


@dataclass
class WorkerSeat:
    """What one worker process needs beyond the RunSpec: who and where it is."""
    rank: int
    local_ip: str
    out: str                         # path prefix for .npy and .json
    progress: str | None = None      # file rewritten with 'done total' blocks
    bml_plan: str | None = None      # BML: this server's plan (JSON file)
    link_mbps: float | None = None   # the host's own link rate (None: unshaped or unknown)


@dataclass
class RunPlan:
    """The JSON file every worker of one allreduce reads: the spec, the job's live
    parameters (window, epoch file, service address) and one seat per rank."""
    spec: RunSpec
    service_ip: str
    window: int
    epoch_file: str | None
    seats: list[WorkerSeat]
    marks: tuple[float, ...] = ()    # progress fractions beyond the spec's failures (a chaos schedule's)

    def peers(self) -> list[str]:
        """Every rank's address, by rank: where the host baselines (ring, ps) connect."""
        return [s.local_ip for s in self.seats]

    def write(self, path: Path) -> Path:
        data = {"spec": self.spec.to_dict(), "service_ip": self.service_ip, "window": self.window,
                "epoch_file": self.epoch_file, "seats": [asdict(s) for s in self.seats], "marks": list(self.marks)}
        Path(path).write_text(json.dumps(data, indent=1))
        return Path(path)

    @classmethod
    def read(cls, path: Path) -> "RunPlan":
        data = json.loads(Path(path).read_text())
        return cls(spec=RunSpec.from_dict(data["spec"]), service_ip=data["service_ip"], window=data["window"],
                   epoch_file=data["epoch_file"], seats=[WorkerSeat(**s) for s in data["seats"]],
                   marks=tuple(data.get("marks", ())))
