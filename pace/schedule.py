"""One data-parallel training iteration under a gradient-communication scheduler.

The model (all times in milliseconds, every worker identical):
  * iteration k: forward of layers 1..L back to back from t = 0, then backward L..1;
    layer i's gradient is released when its backward ends;
  * one communication channel per worker: one allreduce at a time, cost alpha + beta*s;
  * iteration k+1: forward of layer i starts when the backward has ended, forward i-1 has
    ended and every byte of layer i's gradient has been reduced (its update applied);
  * iteration time = end of iteration k+1's forward - one forward pass, i.e. the period
    of the steady state: F + B when communication hides entirely, more when it does not.

Schedulers:
  * FIFO (Horovod): tensors are queued as released; a background loop starts a cycle
    every `cycle_ms` (or right after the previous cycle's allreduces, if they took longer),
    takes what is queued, in arrival order, fused into buffers of at most `threshold`
    bytes (a larger tensor goes alone), and allreduces them one by one.
  * PACE: small neighbouring tensors fused by the DP of fusion.py (groups of at most
    `partition` bytes), larger tensors cut into chunks of `partition` bytes. Whenever the
    channel is free the ready chunk with the highest priority goes next: the one whose
    layer the next forward needs first (lowest layer index). A chunk is never cut in
    flight, so a less urgent tensor is preempted at its chunk boundaries.
`simulate` also accepts the order a scheduler chose plus measured transfer times, so the
same model turns a run through the emulated network into an iteration time (replay).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from agglab.pace.fusion import CostModel, fuse

PROFILE_DIR = Path(__file__).resolve().parent / "profiles"
SCHEDULERS = ("fifo", "pace")
MiB = 1 << 20


@dataclass
class LayerProfile:
    name: str
    params: int
    forward_ms: float
    backward_ms: float

    @property
    def nbytes(self) -> int:
        return 4 * self.params          # float32 gradients


@dataclass
class Profile:
    model: str
    layers: list[LayerProfile]

    @property
    def forward_ms(self) -> float:
        return sum(x.forward_ms for x in self.layers)

    @property
    def backward_ms(self) -> float:
        return sum(x.backward_ms for x in self.layers)


def profile_names() -> list[str]:
    return sorted(p.stem for p in PROFILE_DIR.glob("*.yaml"))


def load_profile(name_or_path: str) -> Profile:
    """A profile by name (resnet50, vgg16, bert-base) or a YAML file of the same form."""
    path = Path(name_or_path)
    if not path.suffix:
        path = PROFILE_DIR / f"{name_or_path}.yaml"
        if not path.exists():
            raise ValueError(f"no profile {name_or_path!r}; known: {', '.join(profile_names())} or a .yaml file")
    data = yaml.safe_load(path.read_text())
    return Profile(data["model"], [LayerProfile(x["name"], int(x["params"]), float(x["forward_ms"]),
                                                float(x["backward_ms"])) for x in data["layers"]])


@dataclass
class Transfer:
    """One allreduce on the channel: pieces of one or more layers' gradients."""
    label: str
    layers: tuple[int, ...]          # layer indices (0 = first in forward) it carries bytes of
    nbytes: int
    ready: float                     # release of the last piece it carries
    priority: int                    # lowest layer index: the earliest consumer
    unit: int                        # the fused group / chunked tensor it belongs to
    last_of_unit: bool = True
    start: float = 0.0
    end: float = 0.0


@dataclass
class Iteration:
    scheduler: str
    iteration_ms: float
    compute: list[tuple[str, float, float]]      # (name, start, end): backward, then next forward
    transfers: list[Transfer]
    preemptions: list[tuple[float, str, str]] = field(default_factory=list)   # (time, preempted, by)


def backward_releases(profile: Profile) -> tuple[list[float], list[tuple[str, float, float]], float]:
    """Release time of each layer's gradient, the compute intervals, and the backward's end."""
    t, compute = 0.0, []
    for x in profile.layers:
        compute.append((f"fwd {x.name}", t, t + x.forward_ms))
        t += x.forward_ms
    release = [0.0] * len(profile.layers)
    for i in reversed(range(len(profile.layers))):
        x = profile.layers[i]
        compute.append((f"bwd {x.name}", t, t + x.backward_ms))
        t += x.backward_ms
        release[i] = t
    return release, compute, t


def fifo_transfers(profile: Profile, release: list[float], cost: CostModel,
                   threshold: int = 64 * MiB, cycle_ms: float = 5.0) -> list[Transfer]:
    order = sorted(range(len(profile.layers)), key=lambda i: release[i])
    queue, out, tick, free = list(order), [], cycle_ms, 0.0
    while queue:
        tick = max(tick, free)
        ready = [i for i in queue if release[i] <= tick]
        if not ready:
            tick += cycle_ms * max(1, math.ceil((release[queue[0]] - tick) / cycle_ms))
            continue
        buf: list[int] = []
        for i in ready + [None]:
            size = sum(profile.layers[j].nbytes for j in buf)
            if buf and (i is None or size + profile.layers[i].nbytes > threshold):
                t = Transfer("+".join(profile.layers[j].name for j in buf), tuple(buf), size,
                             max(release[j] for j in buf), min(buf), len(out))
                t.start, t.end = max(free, tick), max(free, tick) + cost(size)
                free = t.end
                out.append(t)
                buf = []
            if i is not None:
                buf.append(i)
        queue = [i for i in queue if i not in ready]
        tick += cycle_ms
    return out


def pace_units(profile: Profile, release: list[float], cost: CostModel,
               partition: int = 4 * MiB) -> list[list[Transfer]]:
    """Fused groups of small tensors and chunked large ones: one list of transfers per unit."""
    order = sorted(range(len(profile.layers)), key=lambda i: release[i])
    sizes = [profile.layers[i].nbytes for i in order]
    units = []
    for a, b in fuse(sizes, [release[i] for i in order], cost, partition):
        members = order[a:b]
        name = "+".join(profile.layers[i].name for i in members)
        total = sum(sizes[a:b])
        pieces = [min(partition, total - off) for off in range(0, total, partition)] or [0]
        units.append([Transfer(name if len(pieces) == 1 else f"{name}[{c + 1}/{len(pieces)}]",
                               tuple(members), n, max(release[i] for i in members), min(members), len(units),
                               last_of_unit=c == len(pieces) - 1)
                      for c, n in enumerate(pieces)])
    return units


def pace_transfers(units: list[list[Transfer]], cost: CostModel,
                   duration=None) -> tuple[list[Transfer], list[tuple[float, str, str]]]:
    """Priority order with preemption at chunk boundaries; `duration(transfer)` overrides the
    cost model (measured times)."""
    duration = duration or (lambda tr: cost(tr.nbytes))
    pending = [list(u) for u in units]
    out, preempted, t, current = [], [], 0.0, None
    while any(pending):
        ready = [u for u in range(len(pending)) if pending[u] and pending[u][0].ready <= t]
        if not ready:
            t = min(p[0].ready for p in pending if p)
            continue
        u = min(ready, key=lambda k: (pending[k][0].priority, pending[k][0].ready, k))
        if current is not None and current != u and pending[current]:
            preempted.append((t, pending[current][0].label, pending[u][0].label))
        tr = pending[u].pop(0)
        tr.start, tr.end = t, t + duration(tr)
        t, current = tr.end, u
        out.append(tr)
    return out, preempted


def next_forward(profile: Profile, transfers: list[Transfer], backward_end: float):
    """Forward of iteration k+1 given when each layer's gradient is fully reduced."""
    done = [0.0] * len(profile.layers)
    for tr in transfers:
        for i in tr.layers:
            done[i] = max(done[i], tr.end)
    t, compute = backward_end, []
    for i, x in enumerate(profile.layers):
        start = max(t, done[i])
        compute.append((f"fwd' {x.name}", start, start + x.forward_ms))
        t = start + x.forward_ms
    return compute, t


def simulate(profile: Profile, scheduler: str, cost: CostModel, *, threshold: int = 64 * MiB,
             cycle_ms: float = 5.0, partition: int = 4 * MiB) -> Iteration:
    if scheduler not in SCHEDULERS:
        raise ValueError(f"--scheduler must be one of {', '.join(SCHEDULERS)}, got {scheduler!r}")
    release, compute, bwd_end = backward_releases(profile)
    preemptions: list = []
    if scheduler == "fifo":
        transfers = fifo_transfers(profile, release, cost, threshold, cycle_ms)
    else:
        transfers, preemptions = pace_transfers(pace_units(profile, release, cost, partition), cost)
    return finish(profile, scheduler, compute, transfers, bwd_end, preemptions)


def finish(profile, scheduler, compute, transfers, bwd_end, preemptions=()) -> Iteration:
    fwd2, end = next_forward(profile, transfers, bwd_end)
    return Iteration(scheduler, end - profile.forward_ms, compute + fwd2, transfers, list(preemptions))


def replay(profile: Profile, scheduler: str, planned: list[Transfer], measured_ms: list[float]) -> Iteration:
    """The iteration with the scheduler's transfers in their planned order but each lasting
    its measured time (through the emulated network, converted to real-network units):
    a transfer starts when the channel is free and its pieces are released."""
    release, compute, bwd_end = backward_releases(profile)
    t = 0.0
    for tr, ms in zip(planned, measured_ms):
        tr.start = max(t, tr.ready)
        tr.end = t = tr.start + ms
    return finish(profile, scheduler, compute, planned, bwd_end)
