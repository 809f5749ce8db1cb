"""`agglab train --profile-only`: a model's iteration under FIFO and PACE, in the pure model
and with its communication run for real through the emulated network.

Scale (TODO: merge with h-experiments' scale/fidelity module when both branches land;
this is the minimal arithmetic, kept here until then):
  scale    = real-network link rate / emulated link rate (--link-gbps / --bw)
  shrink   = gradient bytes per iteration / bytes sent per worker through the emulator
             (--emulated-mb): every transfer carries 1/shrink of its bytes
  dilation = scale / shrink: emulated seconds per real-network second. A transfer of s
             bytes takes s/R_real really and (s/shrink)/R_emu emulated, dilation times
             longer; compute is slept `dilation` times its profile time, so compute and
             communication keep their real proportions, and measured times divided by
             the dilation are real-network milliseconds.
The scheduler's transfer order and sizes come from the pure model (pace/schedule.py) with
the real network's cost model; the emulator measures each transfer (real packets, loss,
failures, per-call overheads of the Python agents), and `replay` puts the measured times
back into the iteration model per worker.
"""

from __future__ import annotations

import copy
import json
from dataclasses import asdict, dataclass
from pathlib import Path

from emulation.session import Session
from ground.runspec import RunSpec
from pace.fusion import CostModel
from pace.schedule import MiB, SCHEDULERS, load_profile, replay, simulate
from pace.timeline import plot, write_trace

DEFAULT_BW_MBPS = 5.0
LINK_BOUND_FRACTION = 0.7


@dataclass
class PaceOptions:
    link_gbps: float = 10.0          # the real network being modelled
    alpha_us: float = 50.0           # start-up cost per allreduce on the real network
    partition_mb: float = 4.0        # PACE chunk size
    threshold_mb: float = 64.0       # FIFO fusion buffer (Horovod's default)
    cycle_ms: float = 5.0            # FIFO background-loop cycle
    emulated_mb: float = 4.0         # gradient MB per worker and iteration through the emulator

    def check(self) -> "PaceOptions":
        for name, value in asdict(self).items():
            if value <= 0:
                raise ValueError(f"--{name.replace('_', '-')} must be positive, got {value}")
        return self


@dataclass(frozen=True)
class Scale:
    scale: float          # real link rate / emulated link rate
    shrink: float         # real bytes per emulated byte
    dilation: float       # emulated seconds per real second

    @classmethod
    def of(cls, link_gbps: float, bw_mbps: float, total_bytes: int, emulated_mb: float) -> "Scale":
        scale = link_gbps * 1e3 / bw_mbps
        shrink = max(1.0, total_bytes / (emulated_mb * MiB))
        return cls(scale, shrink, scale / shrink)


def model_runs(profile, schedulers, cost: CostModel, opts: PaceOptions) -> dict:
    return {s: simulate(profile, s, cost, threshold=int(opts.threshold_mb * MiB), cycle_ms=opts.cycle_ms,
                        partition=int(opts.partition_mb * MiB)) for s in schedulers}


def run_profile(spec: RunSpec, model: str, schedulers: list[str], opts: PaceOptions, out_dir: Path,
                emulate: bool = True, quiet: bool = True) -> dict:
    opts.check()
    bad = [s for s in schedulers if s not in SCHEDULERS]
    if bad:
        raise ValueError(f"--scheduler must be fifo, pace or both, got {bad[0]!r}")
    profile = load_profile(model)
    if spec.algorithm not in ("switchml", "omnireduce", "ring", "ps"):
        raise ValueError(f"--algorithm {spec.algorithm!r} has no cost model")
    cost = CostModel.for_network(spec.algorithm, spec.workers, opts.link_gbps, opts.alpha_us)
    pure = model_runs(profile, schedulers, cost, opts)
    result = {"ok": True, "profile": profile.model, "workers": spec.workers, "algorithm": spec.algorithm,
              "link_gbps": opts.link_gbps, "alpha_us": opts.alpha_us, "compute_ms": round(
                  profile.forward_ms + profile.backward_ms, 3),
              "model_iteration_ms": {s: round(it.iteration_ms, 3) for s, it in pure.items()},
              "preemptions": {s: len(it.preemptions) for s, it in pure.items()},
              "transfers": {s: len(it.transfers) for s, it in pure.items()}, "emulated": emulate}
    runs = {f"{s} (model)": [it] for s, it in pure.items()}
    measured = pure
    if emulate:
        spec = spec if spec.bw else spec.with_(bw=DEFAULT_BW_MBPS)
        total = sum(x.nbytes for x in profile.layers)
        sc = Scale.of(opts.link_gbps, spec.bw, total, opts.emulated_mb)
        per_worker, info = _emulate(spec, profile, pure, sc, quiet)
        measured = {s: max(its, key=lambda it: it.iteration_ms) for s, its in per_worker.items()}
        runs.update({f"{s} (emulated)": its for s, its in per_worker.items()})
        result.update(scale=round(sc.scale, 3), shrink=round(sc.shrink, 3), dilation=round(sc.dilation, 3),
                      bw_mbps=spec.bw, **info)
        result["ok"] = info["ok"]
        if not info["ok"]:
            return result
    else:
        result.update(scale=None, note="pure model: no network")
    iteration = {s: round(it.iteration_ms, 3) for s, it in measured.items()}
    result["iteration_ms"] = iteration[schedulers[0]] if len(schedulers) == 1 else iteration
    result["scheduler"] = schedulers[0] if len(schedulers) == 1 else "both"
    if {"fifo", "pace"} <= set(schedulers):
        result["speedup"] = round(measured["fifo"].iteration_ms / measured["pace"].iteration_ms, 4)
        result["model_speedup"] = round(pure["fifo"].iteration_ms / pure["pace"].iteration_ms, 4)
    out_dir.mkdir(parents=True, exist_ok=True)
    stem = f"pace-{profile.model}-{'-'.join(schedulers)}"
    result["trace"] = str(write_trace(runs, out_dir / f"{stem}.trace.json"))
    where = (f"emulated at {spec.bw} Mb/s, scale {result['scale']}, shrink {result.get('shrink')}"
             if emulate else "pure model")
    result["timeline"] = str(plot(runs, out_dir / f"{stem}.png",
                                  f"{profile.model}, {spec.workers} workers, {spec.algorithm}, "
                                  f"{opts.link_gbps} Gb/s real network ({where})"))
    return result


def _emulate(spec: RunSpec, profile, pure: dict, sc: Scale, quiet: bool):
    """Replay each scheduler's transfers on every worker host; per-worker Iterations."""
    sizes = {s: [max(1, round(tr.nbytes / 4 / sc.shrink)) for tr in it.transfers] for s, it in pure.items()}
    spec = spec.with_(elements=max(max(v) for v in sizes.values()), dtype="int32")
    per_worker, errors, failures, goodput = {}, [], [], []
    with Session(spec, quiet=quiet) as session:
        for s, it in pure.items():
            path = session.net.run.path / f"transfers-{s}.json"
            path.write_text(json.dumps({"iterations": 1, "transfers": [
                {"ready_s": tr.ready * 1e-3 * sc.dilation, "elements": n} for tr, n in zip(it.transfers, sizes[s])]}))
            emu_seconds = (sum(sizes[s]) * 32 / (spec.bw * 1e6) + it.iteration_ms * 1e-3 * sc.dilation)
            reports, fails = session.run_program("hosts.replay_worker", f"pace-{s}", (str(path),),
                                                 deadline_s=120 + 20 * emu_seconds + spec.give_up * 3)
            failures += fails
            errors += [f"{s} rank {r['rank']}: {r.get('error', 'failed')}" for r in reports if not r.get("ok")]
            if any(not r.get("ok") for r in reports):
                continue
            its = []
            for r in reports:
                spans = r["iterations"][-1]
                real_ms = [(end - start) * 1e3 / sc.dilation for start, end in spans]
                its.append(replay(profile, s, copy.deepcopy(it.transfers), real_ms))
                busy = sum(end - start for start, end in spans)
                goodput.append(sum(sizes[s]) * 32 / busy / 1e6)
            per_worker[s] = its
    info = {"ok": not errors, "failures": failures,
            "emulated_goodput_mbps": round(min(goodput), 3) if goodput else None,
            "link_bound": bool(goodput) and min(goodput) >= LINK_BOUND_FRACTION * spec.bw}
    if errors:
        info["errors"] = errors
    return per_worker, info

