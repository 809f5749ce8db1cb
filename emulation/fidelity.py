"""Did a run measure the network or the emulator? A fidelity probe for every allreduce.

Why (the idea of Mininet-HiFi, CoNEXT'12): an emulated run is only worth reporting if the
emulator's own invariants held while it ran. Here the invariant is that the configured
links, not Python, were the bottleneck. While the workers run, `FidelityProbe` samples

- the byte counters of every link direction (`/proc/net/dev`, one read for all, taken at
  the switch end of each link, which lives in the root namespace: its tx is the direction
  away from the switch, its rx the direction towards it), and
- the CPU time (`/proc/<pid>/stat`, utime+stime) of every switch data plane and every
  worker process of the run, plus the whole machine's busy time (`/proc/stat`).

`summary()` names the bottleneck link direction (the one that needed the most time at its
configured rate: bytes / rate), its achieved rate over the window in which it carried
data, and whether the run stayed **link-bound** (bottleneck at least `BUSY_MIN` busy).
A run whose bottleneck idled below that while a switch or worker process used
`CORE_MAX` of a core, or while the whole machine was `MACHINE_MAX` busy (other jobs count:
a starved emulator is just as unfaithful), is flagged `cpu_bound`. A run with unshaped
links has no configured rate to reach, so it is CPU-bound by construction.

The calibration (`agglab calibrate [--backend bmv2]`) stores this machine's fidelity ceiling
per backend - the highest per-link rate at which allreduce stays within 10% of its analytic
wire time - in `calibration_path()`; the experiments scale real networks under the ceiling
of the backend they run on.
"""

from __future__ import annotations

import json
import os
import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

from agglab.ground import netlease, wire
from agglab.ground.paths import RESULTS
from agglab.ground.schemes import HOST_BASELINES

BUSY_MIN = 0.90          # bottleneck link must be at least this busy while it carries data
CORE_MAX = 0.90          # a process this busy is saturated
MACHINE_MAX = 0.80       # all cores this busy: saturated (the kernel's softirq work for veths and
                         # htb is nobody's utime, and 0.1 s samples of a 2-core box are coarse)
SAMPLE_SECONDS = 0.1
DEFAULT_CEILING_MBPS = 5.0   # measured at 94% of the wire-time ideal at 5 Mb/s on a 2-core machine
TICKS = os.sysconf("SC_CLK_TCK")


def calibration_path() -> Path:
    """Where `agglab calibrate` stores the ceiling: $AGGLAB_CALIBRATION, else
    results/calibration.json in the checkout (per machine: results/ is not committed),
    calibration-k256.json for the wide program variant (4x fewer frames per byte: its own
    ceiling)."""
    return Path(os.environ.get("AGGLAB_CALIBRATION") or RESULTS / f"calibration{wire.variant_suffix()}.json")


SOFT = "soft"            # the backend whose records sit at the file's top level (files before backends)


def _load_file() -> dict:
    try:
        data = json.loads(calibration_path().read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def load_calibration(backend: str = SOFT) -> dict | None:
    """One backend's calibration: its default-shape record, with its other shapes under
    `shapes`; None when that backend was never calibrated.

    Why per backend: the ceiling is where the emulator's CPU keeps up with the links, and a
    BMv2 simple_switch spends far more CPU per frame than the software twin (at 5 Mb/s a BMv2
    switch used 111% of a core for 2 workers). The soft backend's records stay at the file's
    top level (so a file written before backends existed loads as the soft backend's); every
    other backend's sit under `backends.<name>` in the same shape."""
    data = _load_file()
    if backend != SOFT:
        data = (data.get("backends") or {}).get(backend) or {}
    data = {k: v for k, v in data.items() if k != "backends"}
    return data or None


def _store(backend: str, view: dict) -> Path:
    """Write one backend's view back, leaving the other backends' records as they are."""
    data = _load_file()
    if backend == SOFT:
        data = {**view, **({"backends": data["backends"]} if data.get("backends") else {})}
    else:
        data.setdefault("backends", {})[backend] = view
    return _write_calibration(data)


def save_calibration(data: dict, backend: str = SOFT) -> Path:
    """Store the default shape's record (8 workers on one switch) of `backend`; the ceilings
    of its other shapes already in the file (`shapes`) and other backends' are kept."""
    old = load_calibration(backend) or {}
    if old.get("shapes") and "shapes" not in data:
        data = {**data, "shapes": old["shapes"]}
    return _store(backend, {k: v for k, v in data.items() if k != "backends"})


def _write_calibration(data: dict) -> Path:
    path = calibration_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1, sort_keys=True))
    return path


def shape_key(topology: str, workers: int, k: int | None = None, tree: str | None = None,
              scheme: str | None = None) -> str:
    """The name a calibrated shape is stored under: fattree-k8-w128-rat, single-w8,
    single-w8-sparse. The scheme is named only when it is not the dense pipeline (a sparse
    frame costs a BMv2 switch more), so every key written before schemes counted still reads."""
    parts = [str(topology)] + ([f"k{k}"] if k is not None and topology in ("fattree", "bcube") else [])
    return "-".join(parts + [f"w{workers}"] + ([tree] if tree and topology != "single" else [])
                    + ([scheme] if scheme and scheme != "dense" else []))


def save_shape_calibration(key: str, record: dict, backend: str = SOFT) -> Path:
    """Store one shape's record under `shapes` of `backend` (its default shape's record is
    left as it is).

    Why per shape: the ceiling is where the emulator's CPU still keeps up with the links, and
    what it must keep up with grows with the workers and switches: 8 workers on one switch are
    faithful at rates 128 workers on 80 switches are not."""
    view = load_calibration(backend) or {}
    view.setdefault("shapes", {})[key] = record
    return _store(backend, view)


def ceiling_for(workers: int, backend: str = SOFT) -> tuple[float, str] | None:
    """The calibrated ceiling (Mb/s) of `backend` for a run of `workers`, and the shape it was
    measured on: of that backend's calibrated shapes with at least that many workers the
    smallest (its ceiling covers a run this size), else None (no calibration that large: the
    caller keeps its default). A host baseline's shape (`agglab calibrate --scheme ring`) is
    not one: it measures the hosts' TCP, not the switches' pipeline, and answers only its own
    scheme (host_ceiling)."""
    data = load_calibration(backend) or {}
    records = [(key, r) for key, r in (data.get("shapes") or {}).items()
               if (r.get("shape") or {}).get("scheme") not in HOST_BASELINES]
    if data.get("ceiling_mbps"):
        records.append((shape_key("single", data.get("workers") or 8), data))
    fits = sorted((r["workers"], key, r["ceiling_mbps"]) for key, r in records
                  if r.get("ceiling_mbps") and (r.get("workers") or 0) >= workers)
    return (float(fits[0][2]), fits[0][1]) if fits else None


def shape_record(key: str, backend: str = SOFT) -> dict | None:
    """The stored calibration record of exactly the shape `key` on `backend`, also one whose
    search found no faithful rate (`ceiling_mbps` None, its probes kept); None when that shape
    was never searched.

    Why keep a search that found nothing: BMv2's 20-switch k=4 fat-tree with 16 workers is
    faithful at no rate on 2 cores, and its search takes over 8 minutes; a suite that forgot
    it would search it again on every run. `agglab calibrate` of that shape replaces it."""
    data = load_calibration(backend) or {}
    record = (data.get("shapes") or {}).get(key)
    if not record and data.get("ceiling_mbps") and key == shape_key("single", data.get("workers") or 8):
        record = data
    return record or None


def ceiling_for_shape(key: str, backend: str = SOFT) -> float | None:
    """The calibrated ceiling (Mb/s) of exactly the shape `key` on `backend`, None when that
    shape was never calibrated (the default record answers its own key, single-w8).

    Why exact, not the smallest shape at least as large (ceiling_for): a trend on a
    leaf-spine or with the sparse pipeline costs BMv2 more CPU per link-second than the same
    number of workers on one switch, so only its own shape's ceiling says how fast it stays
    faithful."""
    record = shape_record(key, backend)
    return float(record["ceiling_mbps"]) if record and record.get("ceiling_mbps") else None


def host_ceiling(topology: str, workers: int, k: int | None, schemes, backend: str = SOFT) -> float | None:
    """The lowest of the calibrated ceilings (Mb/s) of the host baselines `schemes` (ring,
    ps) on exactly this shape, None unless every one of them was calibrated there: a trend
    of host baselines runs at the rate all its series stay faithful at."""
    found = [ceiling_for_shape(shape_key(topology, workers, k, None, s), backend) for s in schemes]
    return min(found) if found and all(found) else None


def dense_link_seconds(elements: int, rate_mbps: float, window: int | None = None,
                       dtype: str = "int32") -> float:
    """Analytic time of a dense in-network allreduce on one link at `rate_mbps` (the
    calibration's and the bench's ideal; a run's wire time on its own network, bucket and
    trees included, is emulation/wire_model.py `wire_seconds`): every worker link carries its
    aggregation frames each way (full duplex), K-blocks plus with `window` the lead frames
    (ground/wire.py dense_frames). The time is one direction's frames at the link rate; in a
    tree every link carries one frame per block and lead each way, as a worker's does.

    Why the lead frames count: with as many slots as blocks (the agents' default window of
    128 on a float32 gradient of 128 blocks) they double the frames; a time measured against
    the blocks alone would call a faithful run twice too slow."""
    return wire.dense_frames(elements, dtype, window) * wire.FRAME_BYTES * 8 / (rate_mbps * 1e6)


def _read_int(path: str) -> int | None:
    try:
        with open(path) as f:
            return int(f.read())
    except (OSError, ValueError):
        return None


_COLUMNS = {"rx_bytes": 0, "rx_packets": 1, "tx_bytes": 8, "tx_packets": 9}   # /proc/net/dev's


def net_counters() -> dict[str, dict[str, int]]:
    """Every interface of this namespace: {counter: value} for COUNTERS, from one read of
    /proc/net/dev (the same counters as /sys/class/net/IF/statistics).

    Why one file: a k=8 fat-tree has 768 link directions, a sysfs file each, ~15 ms of the
    probe's Python per 0.1 s sample: 15% of a core taken from the emulation it measures."""
    out: dict[str, dict[str, int]] = {}
    try:
        with open("/proc/net/dev") as f:
            lines = f.read().splitlines()[2:]
    except OSError:
        return out
    for line in lines:
        name, _, rest = line.rpartition(":")
        values = rest.split()
        if len(values) >= 10:
            out[name.strip()] = {c: int(values[i]) for c, i in _COLUMNS.items()}
    return out


def _cpu_seconds(pid: int) -> float | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return (int(fields[11]) + int(fields[12])) / TICKS      # utime, stime (fields 14, 15)


def _machine_busy() -> tuple[float, float]:
    """(busy, total) jiffies of all CPUs since boot."""
    return _machine_times()[:2]


def _machine_times() -> tuple[float, float, float]:
    """(busy, total, kernel) jiffies of all CPUs since boot. Kernel is system + irq + softirq:
    the time spent moving frames through veths, htb and sockets (in system calls and in NAPI),
    which no change to a switch's or an agent's own code can remove. A run that is CPU-bound
    with most of the machine in the kernel needs fewer frames or more cores, not faster code."""
    with open("/proc/stat") as f:
        return stat_times(f.readline())


def stat_times(line: str) -> tuple[float, float, float]:
    """(busy, total, kernel) from /proc/stat's "cpu" line: user nice system idle iowait irq softirq ..."""
    values = [int(v) for v in line.split()[1:]]
    idle = values[3] + (values[4] if len(values) > 4 else 0)
    kernel = values[2] + (sum(values[5:7]) if len(values) > 6 else 0)
    return sum(values) - idle, sum(values), kernel


@dataclass
class _Direction:
    name: str              # "a->b"
    intf: str              # switch-end interface
    counter: str           # tx_bytes or rx_bytes
    rate_mbps: float | None
    samples: list[tuple[float, int]] = field(default_factory=list)


def link_ends(graph):
    """(switch, other end, the switch's interface, rate or None) per link: counters are read at
    the switch end, which lives in the root namespace (of its server, in a cluster)."""
    for u, v, e in graph.edges(data=True):
        sw = u if graph.nodes[u]["kind"] == "switch" else v
        yield sw, (v if sw == u else u), e["intfs"][sw], e.get("bw") or None


def directions(sw: str, other: str, intf: str, rate: float | None) -> list["_Direction"]:
    """A link's two directions as the switch end counts them: its tx away, its rx towards it."""
    return [_Direction(f"{sw}->{other}", intf, "tx_bytes", rate),
            _Direction(f"{other}->{sw}", intf, "rx_bytes", rate)]


class _Sampling:
    """A daemon thread that calls `_sample()` every `interval` seconds until `_halt()`, which
    takes one last sample."""

    def _thread_for(self, name: str) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def _sample(self) -> None:
        raise NotImplementedError

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self._sample()

    def _halt(self) -> None:
        self._stop.set()
        self._thread.join(2)
        self._sample()


class FidelityProbe(_Sampling):
    """Samples link counters and process CPU while one allreduce runs (a daemon thread)."""

    def __init__(self, graph, pids_file: Path | None, interval: float = SAMPLE_SECONDS):
        self.interval = interval
        self.pids_file = pids_file
        self.directions = [d for end in link_ends(graph) for d in directions(*end)]
        self.cpu: dict[int, list[tuple[float, float]]] = {}    # pid -> [(t, cpu seconds)]
        self.machine: list[tuple[float, tuple[float, float]]] = []
        self.labels: dict[int, str] = {}
        self._thread_for("fidelity-probe")
        self.started = self.finished = 0.0
        self.begun: float | None = None

    def begin(self) -> None:
        """The timed allreduce starts now (the start gate opened): judge what follows only."""
        self.begun = time.monotonic()

    def start(self) -> "FidelityProbe":
        self.started = time.monotonic()
        self._sample()
        self._thread.start()
        return self

    def _labels(self) -> None:
        if not self.pids_file or not self.pids_file.exists():
            return
        for line in self.pids_file.read_text().splitlines():
            pid, _, what = line.partition(" ")
            if pid.isdigit() and "shell" not in what and "launcher" not in what:
                self.labels[int(pid)] = what

    def _sample(self) -> None:
        now = time.monotonic()
        counters = net_counters()
        for d in self.directions:
            value = counters.get(d.intf, {}).get(d.counter)
            if value is not None:
                d.samples.append((now, value))
        self.machine.append((now, _machine_times()))
        self._labels()
        for pid in self.labels:
            cpu = _cpu_seconds(pid)
            if cpu is not None:
                self.cpu.setdefault(pid, []).append((now, cpu))

    def stop(self, run_seconds: float | None = None) -> dict:
        self._halt()
        self.finished = time.monotonic()
        return self.summary(run_seconds)

    # -- the verdict ---------------------------------------------------------------
    def summary(self, run_seconds: float | None = None) -> dict:
        return shared_cpu(summarize(self.directions, self.cpu, self.labels, [self.machine], os.cpu_count() or 1,
                                    self.started, self.finished, run_seconds, self.begun))


def shared_cpu(record: dict) -> dict:
    """The record, saying whether this run shared the machine's CPU with other runs (ground/
    netlease.py: runs may now coexist, and each halves the others' CPU): `shared_cpu_with`
    lists their pids, and the reason says so, since a figure measured that way is no one's."""
    others = netlease.shared_with()
    record["shared_cpu_with"] = others
    if others:
        record["reason"] += f"; the CPU was shared with {len(others)} other run(s) (pid {', '.join(map(str, others))})"
    return record


COUNTERS = ("tx_bytes", "rx_bytes", "tx_packets", "rx_packets")


def summarize(directions: list[_Direction], cpu: dict, labels: dict, machines: list[list], cores: int,
              started: float, finished: float, run_seconds: float | None = None,
              since: float | None = None) -> dict:
    """The fidelity record from samples, wherever they were taken: `cpu` maps a process key to
    its [(t, cpu seconds)], `labels` the same keys to what the process is ("X data plane" for
    a switch), `machines` holds one [(t, (busy, total))] per machine (a cluster has one per
    server: the busiest counts). CPU shares are taken over the bottleneck's active window
    (worker start-up, when Python imports and no data moves, would otherwise dilute a
    saturated switch). `run_seconds`: the allreduce's own duration, when known (bottleneck).
    `since` (the start gate's opening) drops the link samples before it: a 128-worker PS opens
    16,256 connections before the gate, which are not the timed allreduce."""
    if since is not None:
        directions = [replace(d, samples=_from(d.samples, since)) for d in directions]
        started = max(started, since)
    link = bottleneck(directions, run_seconds)
    t0, t1 = (link["window"] if link else (started, finished))
    wall = max(t1 - t0, 1e-9)
    share = {key: _delta(samples, t0, t1) / wall for key, samples in cpu.items() if key in labels}
    switch_cpu = {labels[k].replace(" data plane", ""): round(s, 3)
                  for k, s in share.items() if "data plane" in labels[k]}
    host_cpu = [round(s, 3) for k, s in share.items() if "data plane" not in labels[k]]
    busy, kernel = 0.0, None
    for machine in machines:
        used = _delta([(t, v[0]) for t, v in machine], t0, t1)
        total = max(_delta([(t, v[1]) for t, v in machine], t0, t1), 1)
        if used / total >= busy:
            busy = used / total
            sampled = all(len(v) > 2 for _, v in machine)
            kernel = round(_delta([(t, v[2]) for t, v in machine], t0, t1) / total, 3) if sampled else None
    if link:
        link = {k: v for k, v in link.items() if k != "window"}
    return verdict(link, switch_cpu, host_cpu, round(busy, 3), cores, kernel)


def _from(samples: list[tuple[float, int]], t: float) -> list[tuple[float, int]]:
    """The samples from t on, with the last one before t as their baseline."""
    return samples[max([i for i, (s, _) in enumerate(samples) if s <= t], default=0):]


def _delta(samples: list[tuple[float, float]], t0: float, t1: float) -> float:
    """How much a cumulative counter grew between t0 and t1 (nearest samples at or before)."""
    def at(t: float) -> float:
        before = [v for s, v in samples if s <= t + 1e-9]
        return before[-1] if before else samples[0][1]
    return at(t1) - at(t0) if samples else 0.0


def bottleneck(directions: list[_Direction], run_seconds: float | None = None) -> dict | None:
    """The link direction that needed the most time at its configured rate, with the rate it
    achieved over the window in which it carried data (first to last sample that grew).

    `run_seconds` (first worker's start to last one's end): the samples' window runs up to
    2 x SAMPLE_SECONDS past a short run (OmniReduce at 1% on BMv2, 0.175 s for 0.167 s of wire
    time, was called 79% busy). Every byte counted was sent during the run, so bytes over its
    time is a rate surely reached: the higher estimate counts (neither can overstate)."""
    best, best_need = None, -1.0
    for d in directions:
        if len(d.samples) < 2:
            continue
        moved = d.samples[-1][1] - d.samples[0][1]
        need = moved * 8 / (d.rate_mbps * 1e6) if d.rate_mbps else moved * 1e-12
        if moved > 0 and need > best_need:
            best, best_need = d, need
    if best is None:
        return None
    grew = [i for i in range(1, len(best.samples)) if best.samples[i][1] > best.samples[i - 1][1]]
    t0, t1 = best.samples[grew[0] - 1][0], best.samples[grew[-1]][0]
    moved = best.samples[-1][1] - best.samples[0][1]
    # The rate while data was pending: over the sample intervals strictly inside the active
    # window (the first and last ones are only partly active), when there are any.
    a, b = grew[0], grew[-1] - 1
    if b > a:
        (ta, va), (tb, vb) = best.samples[a], best.samples[b]
        achieved = (vb - va) * 8 / max(tb - ta, 1e-9) / 1e6
    else:
        achieved = moved * 8 / max(t1 - t0, 1e-9) / 1e6
    if run_seconds and run_seconds > 0:
        achieved = max(achieved, moved * 8 / run_seconds / 1e6)
    return {"link": best.name, "configured_mbps": best.rate_mbps, "achieved_mbps": round(achieved, 3),
            "bytes": moved, "active_seconds": round(t1 - t0, 3), "window": (t0, t1),
            "utilisation": round(achieved / best.rate_mbps, 3) if best.rate_mbps else None}


def verdict(link: dict | None, switch_cpu: dict[str, float], host_cpu: list[float],
            machine: float, cores: int, kernel: float | None = None) -> dict:
    """The fidelity record of a run: the numbers, `link_bound`, `cpu_bound` and why; `kernel`,
    the share of the machine's time spent in the kernel, where it was sampled."""
    top_switch = max(switch_cpu.values(), default=0.0)
    top_host = max(host_cpu, default=0.0)
    saturated = []
    if top_switch >= CORE_MAX:
        saturated.append(f"a switch used {top_switch:.0%} of a core")
    if top_host >= CORE_MAX:
        saturated.append(f"a worker used {top_host:.0%} of a core")
    if machine >= MACHINE_MAX:
        saturated.append(f"the machine was {machine:.0%} busy ({cores} cores" +
                         (f", {kernel:.0%} of its time in the kernel)" if kernel is not None else ")"))
    util = link["utilisation"] if link else None
    if link is None:
        link_bound, reason = False, "no link carried data"
    elif util is None:
        link_bound, reason = False, "links unshaped (no configured rate): the time measures CPU"
    else:
        link_bound = util >= BUSY_MIN
        reason = (f"bottleneck {link['link']} {util:.0%} busy" +
                  ("" if link_bound else f" (< {BUSY_MIN:.0%})"))
    cpu_bound = not link_bound and (util is None or bool(saturated))
    if saturated:
        reason += "; " + "; ".join(saturated)
    return {"link": link, "link_bound": link_bound, "cpu_bound": cpu_bound, "reason": reason,
            "switch_cpu": switch_cpu, "host_cpu_max": round(top_host, 3),
            "host_cpu_total": round(sum(host_cpu), 3), "machine_busy": machine, "machine_kernel": kernel}
