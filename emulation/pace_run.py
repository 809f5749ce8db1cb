"""`agglab train --profile-only`: a model's iteration under FIFO and PACE, in the pure model
and with its communication run for real through the emulated network.

Scale (ground/scale.py, shared with the experiments; `rate` and `size` below):
  scale    = real-network link rate / emulated link rate (--link-gbps / --bw)
  shrink   = gradient bytes per iteration / bytes sent per worker through the emulator
             (--emulated-mb): every transfer carries 1/shrink of its bytes
  dilation = scale / shrink: emulated seconds per real-network second. A transfer of s
             bytes takes s/R_real really and (s/shrink)/R_emu emulated, dilation times
             longer; compute is slept `dilation` times its profile time, so compute and
             communication keep their real proportions, and measured times divided by
             the dilation are real-network milliseconds.
The scheduler's transfer order and sizes come from the pure model (pace/schedule.py) with
the real network's cost model (`model_iteration_ms`). Through the emulator, the network's
own alpha + beta*s is first measured (`calibrate`, in real-network units: the Python
agents' per-call overhead is far above a real NIC's, so it shows here), the schedules are
planned with that cost (--plan-cost measured, the default; PACE profiles alpha and beta
online too) or with the modelled one (--plan-cost model), every transfer then runs for
real (packets, loss, failures) and `replay` puts the measured times back into the
iteration model per worker.
"""

from __future__ import annotations

import copy
import json
import os
import threading
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path


from agglab.emulation import pace_fidelity
from agglab.emulation.session import Session
from agglab.hosts.replay_worker import answer_path
from agglab.ground import wire
from agglab.ground.runspec import RunSpec
from agglab.pace.fusion import CostModel
from agglab.ground.scale import Scale
from agglab.pace.schedule import MiB, SCHEDULERS, load_profile, replay, simulate
from agglab.pace.timeline import plot, write_trace

DEFAULT_BW_MBPS = 5.0
# Outstanding slots per worker: a window of 128 packets (~42 KB) takes ~70 ms to drain at
# 5 Mb/s, longer than the agents' first retransmission timeout, so every call would start
# with spurious retransmissions; 16 packets (~5 KB, ~8 ms) still fill a veth's tiny
# bandwidth-delay product.
WINDOW = 16
# Planning with the measured cost, a PACE chunk is large enough that its start-up
# cost is at most a tenth of its transfer time (PACE tunes its partition size the same way):
# the emulator's per-call cost in real-network units grows with the shrink.
ALPHA_SHARE = 10.0


@dataclass
class PaceOptions:
    link_gbps: float = 10.0          # the real network being modelled
    alpha_us: float = 50.0           # start-up cost per allreduce on the real network
    partition_mb: float = 4.0        # PACE chunk size
    threshold_mb: float = 64.0       # FIFO fusion buffer (Horovod's default)
    cycle_ms: float = 5.0            # FIFO background-loop cycle
    emulated_mb: float = 4.0         # gradient MB per worker and iteration through the emulator
    plan_cost: str = "measured"      # plan the schedules with the emulator's calibrated cost, or "model"

    def check(self) -> "PaceOptions":
        if self.plan_cost not in ("measured", "model"):
            raise ValueError(f"--plan-cost must be measured or model, got {self.plan_cost!r}")
        for name, value in asdict(self).items():
            if name != "plan_cost" and not 0 < value < float("inf"):      # nan is refused too
                raise ValueError(f"--{name.replace('_', '-')} must be positive, got {value}")
        return self


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
    cost = CostModel.for_network(spec.algorithm, spec.workers, opts.link_gbps, opts.alpha_us)
    pure = model_runs(profile, schedulers, cost, opts)
    result = {"ok": True, "profile": profile.model, "workers": spec.workers, "algorithm": spec.algorithm,
              "link_gbps": opts.link_gbps, "alpha_us": opts.alpha_us,
              "model_cost": {"alpha_ms": round(cost.alpha_ms, 4), "ms_per_mb": round(cost.beta_ms_per_byte * MiB, 4)},
              "compute_ms": round(
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
        per_worker, info = _emulate(spec, profile, pure, sc, opts, quiet)
        measured = {s: max(its, key=lambda it: it.iteration_ms) for s, its in per_worker.items()}
        runs.update({f"{s} (emulated)": its for s, its in per_worker.items()})
        result.update(scale=round(sc.rate, 3), shrink=round(sc.size, 3), dilation=round(sc.dilation, 3),
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
        planned = result.get("planned_iteration_ms")
        if planned:                    # the model's prediction with the measured alpha and beta
            result["measured_cost_speedup"] = round(planned["fifo"] / planned["pace"], 4)
    out_dir.mkdir(parents=True, exist_ok=True)
    stem = f"pace-{profile.model}-{'-'.join(schedulers)}"
    result["trace"] = str(write_trace(runs, out_dir / f"{stem}.trace.json"))
    where = (f"emulated at {spec.bw} Mb/s, scale {result['scale']}, shrink {result.get('shrink')}"
             if emulate else "pure model")
    result["timeline"] = str(plot(runs, out_dir / f"{stem}.png",
                                  f"{profile.model}, {spec.workers} workers, {spec.algorithm}, "
                                  f"{opts.link_gbps} Gb/s real network ({where})"))
    return result


class Replayers:
    """The job's replay workers, up for the whole PACE run (hosts/replay_worker.py's serve
    mode): `replay` hands every rank the next list and waits for their answers; `close`
    tells them to stop. Why one set of processes: each phase (calibration, FIFO, PACE) used
    to start its own, paying the agents' start-up and a cold communicator every time."""

    def __init__(self, session, deadline_s: float = 3600.0):
        self.session, self.n = session, 0
        self.inbox = session.net.run.path / "replay-inbox"
        self.inbox.mkdir()
        self.ranks = len(session.job.workers)
        self.reports: list[dict] = []
        self.failures: list = []
        self.thread = threading.Thread(target=self._run, args=(deadline_s,), name="replay-workers", daemon=True)
        self.thread.start()

    def _run(self, deadline_s: float) -> None:
        self.reports, self.failures = self.session.run_program(
            "agglab.hosts.replay_worker", "pace", (str(self.inbox),), deadline_s=deadline_s)

    def _post(self, work: dict) -> int:
        n, self.n = self.n, self.n + 1
        tmp = self.inbox / f"{n:03d}.tmp"
        tmp.write_text(json.dumps(work))
        os.replace(tmp, self.inbox / f"{n:03d}.json")
        return n

    def replay(self, name: str, transfers: list[dict], deadline_s: float):
        """Every worker replays `transfers`: (per-rank spans in emulated seconds, errors,
        retransmissions)."""
        n = self._post({"iterations": 1, "transfers": transfers, "name": name})
        paths = [answer_path(self.inbox, n, r) for r in range(self.ranks)]
        deadline = time.monotonic() + deadline_s
        while not all(p.exists() for p in paths):
            if not self.thread.is_alive():
                errors = [f"{name} rank {r['rank']}: {r.get('error', 'failed')}" for r in self.reports
                          if not r.get("ok")] or [f"{name}: the replay workers exited"]
                return [], errors, 0
            if time.monotonic() > deadline:
                self.session.cancel()
                return [], [f"{name}: no answer from every rank within {deadline_s:.0f} s"], 0
            time.sleep(0.01)
        answers = [json.loads(p.read_text()) for p in paths]
        return ([a["iterations"][-1] for a in answers], [], sum(a.get("retransmissions", 0) for a in answers))

    def close(self) -> list:
        """Stop the workers (killed if they do not stop); the scripted failures' records."""
        if self.thread.is_alive():
            self._post({"stop": True})
            self.thread.join(30)
        if self.thread.is_alive():
            self.session.cancel()
            self.thread.join(30)
        return self.failures


def calibrate(replayers: Replayers, elements: list[int], sc: Scale, bw_mbps: float, give_up: float) -> CostModel:
    """The emulated network's own alpha + beta*s, in real-network units: each size allreduced
    three times back to back, a least-squares line through (real bytes, real ms)."""
    sizes = [n for n in elements for _ in range(3)]
    spans, errors, _ = replayers.replay("calibrate", [{"ready_s": 0, "elements": n} for n in sizes],
                                        120 + give_up * 3 + 40 * sum(sizes) * 32 / (bw_mbps * 1e6))
    if errors:
        raise RuntimeError("; ".join(errors))
    return CostModel.fit([n * 4 * sc.size for n in sizes] * len(spans),
                    [(end - start) * 1e3 / sc.dilation for rank in spans for start, end in rank])


def _emulate(spec: RunSpec, profile, pure: dict, sc: Scale, opts: PaceOptions, quiet: bool):
    """Calibrate the emulated network's cost model, plan each scheduler with it (PACE's
    fusion and FIFO's cycles see the network they run on), replay the plans on every worker
    host; per-worker Iterations in real-network units."""
    biggest = max(max(tr.nbytes for tr in it.transfers) for it in pure.values())
    spec = spec.with_(elements=max(1, round(biggest / 4 / sc.size)), dtype="int32",
                      window=spec.window or WINDOW)
    per_worker, errors, failures, goodput, busy, retx = {}, [], [], [], [], 0
    wire_of = pace_fidelity.TransferWire(spec)
    with Session(spec, quiet=quiet) as session:
        replayers = Replayers(session)
        try:
            cost = calibrate(replayers, [wire.K * 16, spec.elements], sc, spec.bw, spec.give_up)
            plans, partition = pure, opts.partition_mb
            if opts.plan_cost == "measured":
                partition = max(opts.partition_mb, ALPHA_SHARE * cost.alpha_ms / cost.beta_ms_per_byte / MiB)
                plans = model_runs(profile, list(pure), cost, replace(opts, partition_mb=partition))
            # the model's prediction on the network as measured: what the emulated iteration should match
            predicted = plans if opts.plan_cost == "measured" else model_runs(profile, list(pure), cost, opts)
            for s, it in plans.items():
                sizes = [max(1, round(tr.nbytes / 4 / sc.size)) for tr in it.transfers]
                emu_seconds = sum(sizes) * 32 / (spec.bw * 1e6) + it.iteration_ms * 1e-3 * sc.dilation
                spans, errs, r = replayers.replay(
                    f"pace-{s}", [{"ready_s": tr.ready * 1e-3 * sc.dilation, "elements": n}
                                  for tr, n in zip(it.transfers, sizes)],
                    120 + 20 * emu_seconds + spec.give_up * 3)
                errors, retx = errors + errs, retx + r
                its = []
                for rank in spans:
                    real_ms = [(end - start) * 1e3 / sc.dilation for start, end in rank]
                    its.append(replay(profile, s, copy.deepcopy(it.transfers), real_ms))
                    goodput.append(sum(sizes) * 32 / sum(end - start for start, end in rank) / 1e6)
                    busy.append(pace_fidelity.busy_share([wire_of(n) for n in sizes], rank))
                if its:
                    per_worker[s] = its
        finally:
            failures = replayers.close()
    info = {"ok": not errors, "failures": failures, "retransmissions": retx,
            # lists each rank's one process replayed (calibration, then each scheduler's plan)
            "replay_served": min((r.get("served", 0) for r in replayers.reports), default=0),
            "emulated_cost": {"alpha_ms": round(cost.alpha_ms, 4),
                              "ms_per_mb": round(cost.beta_ms_per_byte * MiB, 4)},
            "plan_cost": opts.plan_cost, "partition_mb": round(partition, 3),
            "planned_iteration_ms": {s: round(p.iteration_ms, 3) for s, p in predicted.items()},
            "emulated_plan": {s: {"transfers": len(p.transfers), "preemptions": len(p.preemptions)}
                              for s, p in plans.items()},
            "emulated_goodput_mbps": round(min(goodput), 3) if goodput else None,
            "transfers_busy": round(min(busy), 3) if busy else None,
            "link_bound": pace_fidelity.link_bound(busy)}
    if errors:
        info["errors"] = errors
    return per_worker, info


def per_scheduler(result: dict) -> dict[str, dict]:
    """A two-scheduler `run_profile` result as one allreduce-like result per scheduler, for
    the experiment runner (experiments/runner.py): `seconds` is the iteration in emulated
    seconds (real-network ms x dilation / 1000, so the runner's real = emulated x shrink /
    scale gives the real-network iteration back), `fidelity` the transfers' own verdict:
    a replay is link-bound when every worker's transfers kept the link at least BUSY_MIN busy
    with their frames (emulation/pace_fidelity.py; compute gaps make the probe's link
    utilisation meaningless here)."""
    bw = result.get("bw_mbps")
    goodput = result.get("emulated_goodput_mbps")
    busy = result.get("transfers_busy")
    bound = bool(result.get("link_bound"))
    fidelity = {
        "link_bound": bound, "cpu_bound": not bound,
        "reason": (f"transfers kept the link {busy:.0%} busy with their frames (link-bound at >= "
                   f"{pace_fidelity.BUSY_MIN:.0%}; compute gaps excluded; payload {goodput} of {bw} Mb/s)"
                   if busy is not None else "no transfers measured"),
        "link": {"link": "worker transfers", "configured_mbps": bw,
                 "achieved_mbps": round(busy * bw, 3) if busy is not None and bw else None,
                 "goodput_mbps": goodput, "utilisation": busy}}
    common = {k: result[k] for k in ("emulated_cost", "partition_mb", "compute_ms", "model_speedup", "speedup",
                                     "planned_iteration_ms", "model_cost", "measured_cost_speedup",
                                     "trace", "timeline", "scale", "shrink", "dilation") if k in result}
    out = {}
    iteration = result.get("iteration_ms") if isinstance(result.get("iteration_ms"), dict) else {}
    for s in SCHEDULERS:
        r = {"ok": bool(result.get("ok")) and s in iteration, "exact": True, "fidelity": fidelity,
             "retransmissions": result.get("retransmissions", 0), "failures": result.get("failures", []),
             "pace": {**common, "scheduler": s, "model_iteration_ms": result["model_iteration_ms"].get(s)}}
        if s in iteration:
            r["seconds"] = iteration[s] / 1e3 * result["scale"] / result["shrink"]
            r["pace"]["iteration_ms"] = iteration[s]
        else:
            r["errors"] = result.get("errors") or ["no iteration measured"]
        out[s] = r
    return out
