"""`make bench`: every speed figure the project has a target for, beside that target, printed and saved as JSON.

Figures (each says its link rate, its scale and whether the run was link-bound, because
an emulation is only faithful while the links, not the CPU, are the bottleneck):

  pipeline   aggregation pipeline in-process, packets/s (dense and sparse)
  daemon     software-switch daemon on veths, 8-way aggregation, frames/s in   (>= 150,000)
  wire       8 workers x 1M int32 on one switch at 5/10/20/40 Mb/s links: seconds
             against the analytic wire time                                      (<= 1.1x at 20)
  wide       the wire figures in the wide program variant (AGGLAB_K=256, 1082-byte
             frames) at 20/40/80 Mb/s                                         (informational)
  reroute    k=4 fat-tree, a tree link fails mid-run: link down to new trees
             installed (detect + recompute + install), spt/rat/packing, dense
             and sparse                                                          (median < 50 ms)
  switchfail k=4 fat-tree, an aggregating tree switch killed (kill -9) mid-run: exit
             seen (detect), recompute, install; dense and sparse, one network,
             the switch restarted between kills                               (informational)
  policer    a host in no job floods one switch with 100,000 unpaced frames while a job
             of 4 workers at 20 Mb/s runs: the job's rate under the flood over its rate
             alone, in one run, policer on and off                           (on: >= 0.9)
  chaos      k=4 fat-tree, 2 jobs x 4 workers, --chaos over 20 seeds: outcomes (exact /
             cleanly partitioned / other), faults struck and what they cost, leftovers
                                                                   (every seed exact or partitioned, 0 left)
  build      k=8 fat-tree (80 switches, 16 workers) built and programmed         (< 15 s)
  sparse     8 workers x 1M int32 at 5 Mb/s, overlapping blocks: dense time over
             sparse time at density 0.1 and 0.01                                 (>= 9x, >= 50x)
  trees      tree computation on fat-trees (informational)
  bmv2       8-way aggregation frames/s per BMv2 switch, reference and performance
             build (-O3, no logging macros, no elogger), beside the software twin's
             (same lab, senders, packets, program); ratio and link-rate ceiling
             (skipped without BMv2/p4c; a build not installed says how to build it)
  bmv2-reroute  k=4 fat-tree of BMv2 switches, a rat tree link fails mid-run, dense and
             sparse, 3 runs each (--bmv2-reroute-runs): phases, exactness  (install < 250 ms)

    sudo .venv/bin/python -m agglab.bench                      # everything, results/bench/<time>.json
    sudo .venv/bin/python -m agglab.bench --only daemon,build --compare results/bench/PREV.json

Figures that need root (everything but `pipeline` and `trees`) are skipped without it.
Timings depend on the machine's load and its CPU speed of the moment; the JSON records the load
average, the CPU count and, per section, a fixed loop's CPU time (`cpu_reference_s`).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from ground import lifeline, netlease, schemes, wire
from ground.paths import REPO, RESULTS

SECTIONS = ("pipeline", "daemon", "wire", "wide", "reroute", "switchfail", "policer", "chaos", "build", "sparse",
            "trees", "bmv2", "bmv2-reroute")
ROOT_SECTIONS = {"daemon", "wire", "wide", "reroute", "switchfail", "policer", "chaos", "build", "sparse", "bmv2",
                 "bmv2-reroute"}
LINK_BOUND = 1.10          # a run within 10% of its analytic wire time is link-bound


def figure(name: str, value: float, unit: str, *, target: str | None = None, met: bool | None = None,
           link_mbps: float | None = None, scale: str = "", link_bound: bool | None = None,
           **extra) -> dict:
    """One measured figure with everything needed to judge it."""
    return {"name": name, "value": round(value, 4) if isinstance(value, float) else value, "unit": unit,
            "target": target, "met": met, "link_mbps": link_mbps, "scale": scale,
            "link_bound": link_bound, **extra}


def wire_seconds(elements: int, mbps: float) -> float:
    """Analytic time of a dense allreduce on one switch: every worker's link carries
    ceil(elements/K) frames of FRAME_BYTES each way (full duplex), nothing else."""
    packets = -(-elements // wire.K)
    return packets * wire.FRAME_BYTES * 8 / (mbps * 1e6)


# ---- sections ----------------------------------------------------------------------------
def bench_pipeline(_a) -> list[dict]:
    from softswitch import bench_pipeline

    scale = "8 workers x 256 slots x 20 rounds, one core"
    return [figure("pipeline dense", bench_pipeline.run(8, 256, 20), "packets/s", scale=scale,
                   link_bound=False, links="in-process, no links"),
            figure("pipeline sparse (density 0.2)", bench_pipeline.run(8, 256, 20, density=0.2),
                   "packets/s", scale=scale, link_bound=False, links="in-process, no links")]


def bench_daemon(a) -> list[dict]:
    from softswitch import bench_io

    out = []
    for sched in ("batch", "normal"):
        opts = bench_io.options(["--seconds", str(a.daemon_seconds), "--sender-sched", sched])
        r = bench_io.run("agg", opts)
        main = sched == "batch"       # the target's figure: senders that never preempt the daemon
        out.append(figure("daemon frames/s in, 8-way aggregation" + ("" if main else ", senders SCHED_OTHER"),
                          r["rx_pps"], "frames/s",
                          target=">= 150,000 (3x the ~50,000 measured at the start)" if main else None,
                          met=r["rx_pps"] >= 150_000 if main else None,
                          link_mbps=None, scale=f"8 workers x window {opts.window} on unshaped veths",
                          link_bound=False, frames_out_per_s=round(r["tx_pps"]),
                          detail=f"daemon CPU {r['daemon_cpu']:.0%} (kernel {r['daemon_sys']:.0%}), "
                                 f"senders SCHED_{'BATCH' if main else 'OTHER'}",
                          daemon_cpu=round(r["daemon_cpu"], 3), daemon_kernel_cpu=round(r["daemon_sys"], 3),
                          retransmissions=r["retx"], wrong_results=r["bad"]))
    return out


def _checked(r: dict) -> dict:
    """A run's result, or the reason it has no figures (its workers' first errors)."""
    if r.get("seconds") is None:
        raise RuntimeError("the run failed: " + "; ".join((r.get("errors") or ["no result"])[:3]))
    return r


def _where_time_went(r: dict) -> str:
    """The run's bottleneck link and CPU use, from its fidelity record and worker reports."""
    f = r.get("fidelity") or {}
    link = f.get("link") or {}
    busy = f"bottleneck {link['link']} {link['utilisation']:.0%} busy, " if link.get("utilisation") is not None else ""
    switches = ", ".join(f"{name} {cpu:.0%}" for name, cpu in (f.get("switch_cpu") or {}).items())
    return (f"{busy}{r['retransmissions']} resends, workers {r.get('worker_cpu_s')} CPU-s, "
            f"switch CPU {switches or '?'}, machine {f.get('machine_busy', 0):.0%} busy")


def bench_wire(a) -> list[dict]:
    from emulation.session import run_allreduce

    out = []
    wide = wire.WIDE                              # the optional variant: informational, no target
    for mbps in a.rates:
        r = _checked(run_allreduce(workers=8, elements=a.elements, dtype="int32", bw=mbps))
        ideal = wire_seconds(a.elements, mbps)
        ratio = r["seconds"] / ideal
        at_target = mbps == 20 and not wide
        out.append(figure(f"8 x {a.elements:,} int32 at {mbps:g} Mb/s" + (f", K={wire.K}" if wide else ""),
                          r["seconds"], "s",
                          target="<= 1.10x analytic" if at_target else None,
                          met=ratio <= LINK_BOUND if at_target else None, link_mbps=mbps,
                          scale=f"8 workers x {a.elements:,} int32, one switch, {wire.K} per packet",
                          link_bound=ratio <= LINK_BOUND, analytic_s=round(ideal, 3),
                          detail=f"{ratio:.2f}x the analytic {ideal:.2f} s, exact={r['exact']}, "
                                 f"{_where_time_went(r)}",
                          x_analytic=round(ratio, 3), exact=r["exact"],
                          retransmissions=r["retransmissions"], worker_cpu_s=r.get("worker_cpu_s"),
                          fidelity=r.get("fidelity")))
    return out


def bench_wide(a) -> list[dict]:
    """The wire figures again in the wide program variant (AGGLAB_K=256: 4x fewer, 1082-byte
    frames for the same bytes), in a child bench: K is fixed per process."""
    rates = ",".join(f"{r:g}" for r in a.wide_rates)
    with tempfile.TemporaryDirectory(prefix="agglab-bench-wide-") as tmp:
        out = Path(tmp) / "wide.json"
        proc = subprocess.run([sys.executable, "-m", "agglab.bench", "--only", "wire", "--rates", rates,
                               "--elements", str(a.elements), "--out", str(out)], cwd=REPO,
                              env={**os.environ, "AGGLAB_K": str(wire.WIDE_K)},
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              preexec_fn=lifeline.preexec(bound_to_thread=True))
        if proc.returncode != 0 or not out.exists():
            raise RuntimeError(f"the AGGLAB_K={wire.WIDE_K} bench failed: {proc.stdout[-1500:]}")
        report = json.loads(out.read_text())
    if report["skipped"]:
        raise RuntimeError(f"the AGGLAB_K={wire.WIDE_K} bench skipped: {report['skipped']}")
    return report["figures"]


def _phases() -> tuple[str, ...]:
    """The figures of a reroute: its total's parts, then controller.reroute.record.REROUTE_PHASES."""
    from controller.reroute.record import REROUTE_PHASES

    return ("detect_ms", "recompute_ms", "install_ms") + REROUTE_PHASES


def _reroute_figure(name: str, r: dict, f: dict, scale: str) -> tuple[float, dict]:
    """A reroute's total (link down to new trees installed) and its figure with the phases."""
    total = sum(f.get(k) or 0 for k in ("detect_ms", "recompute_ms", "install_ms"))
    phases = _phases()
    return total, figure(name, total, "ms", link_mbps=None, scale=scale, link_bound=None, exact=r["exact"],
                         link=f.get("link"),
                         detail=" / ".join(f"{k[:-3]} {f.get(k)}" for k in phases if f.get(k) is not None)
                         + f" ms, exact={r['exact']}",
                         **{k: f.get(k) for k in phases})


def bench_reroute(a) -> list[dict]:
    from emulation.session import run_allreduce

    out, totals = [], []
    for algorithm in schemes.ON_TREES:
        for tree in ("spt", "rat", "packing"):
            extra = {"density": 0.2, "pattern": "random"} if schemes.SCHEMES[algorithm].sparse else {}
            r = run_allreduce(topology="fattree", k=4, workers=8, elements=a.reroute_elements,
                              tree=tree, algorithm=algorithm, fail=["tree@0.5"], **extra)
            for f in r["failures"]:
                total, fig = _reroute_figure(f"reroute {tree} {schemes.kind(algorithm)}",
                                             r, f, f"fat-tree k=4, 8 workers x {a.reroute_elements:,}")
                totals.append(total)
                out.append(fig)
    if totals:
        median = statistics.median(totals)
        out.append(figure("reroute median (link down to new trees installed)", median, "ms",
                          target="< 50 ms", met=median < 50, scale=f"{len(totals)} reroutes above",
                          link_bound=None))
    return out


def bench_bmv2_reroute(a) -> list[dict]:
    """BMv2's reroute: a rat tree link fails mid-run on a k=4 fat-tree of BMv2 switches, dense and
    sparse, `--bmv2-reroute-runs` times each; every run must be exact, and the install (freeze,
    snapshot, entries, preload) should stay under 250 ms."""
    from controller.bmv2_tools import find_bmv2_tool
    from emulation.session import run_allreduce

    if not (find_bmv2_tool("simple_switch") and find_bmv2_tool("p4c")):
        raise RuntimeError("simple_switch or p4c not found (scripts/provision-vm.sh builds them)")
    out = []
    scale = "BMv2 fat-tree k=4, 8 workers x 20,000 int32, rat"
    for algorithm in schemes.ON_TREES:
        kind = schemes.kind(algorithm)
        extra = {"density": 0.2} if schemes.SCHEMES[algorithm].sparse else {}
        installs, exact = [], 0
        for run in range(a.bmv2_reroute_runs):
            r = run_allreduce(backend="bmv2", topology="fattree", k=4, workers=8, elements=20_000, tree="rat",
                              algorithm=algorithm, fail=["tree@0.5"], **extra)
            exact += bool(r["exact"])
            for f in r["failures"]:
                _, fig = _reroute_figure(f"BMv2 reroute {kind} run {run + 1}", r, f, scale)
                installs.append(f.get("install_ms") or 0)
                out.append(fig)
                print(f"  ({kind} run {run + 1} of {a.bmv2_reroute_runs}: install {f.get('install_ms')} ms, "
                      f"exact={r['exact']})", flush=True)   # progress; the figures follow at the end
        if installs:
            median = statistics.median(installs)
            out.append(figure(f"BMv2 reroute {kind}: median install", median, "ms", target="< 250 ms",
                              met=median < 250 and exact == a.bmv2_reroute_runs, link_mbps=None,
                              scale=scale, link_bound=None,
                              detail=f"{exact} of {a.bmv2_reroute_runs} runs exact, install "
                                     f"{min(installs):.0f}-{max(installs):.0f} ms"))
    return out


def bench_switchfail(a) -> list[dict]:
    """Switch-failure recovery on one k=4 fat-tree: per kill, kill to exit seen (detect), trees
    recomputed, installed (freeze, snapshot, entries, preload), while 8 workers run an
    allreduce of a.reroute_elements int32 each on unshaped links (the load)."""
    from emulation.session import Session
    from ground.runspec import RunSpec

    TIMES = _phases()
    out, totals = [], []
    spec = RunSpec(topology="fattree", k=4, workers=8, elements=a.reroute_elements, bw=a.switchfail_bw)
    with Session(spec) as s:
        for i in range(a.switchfail_kills):
            for algorithm in schemes.ON_TREES:
                extra = {"density": 0.2} if schemes.SCHEMES[algorithm].sparse else {}
                r = s.allreduce(algorithm=algorithm, fail_switch=["tree@0.5"], seed=i, **extra)
                for f in r["failures"]:
                    total = sum(f.get(k) or 0 for k in ("detect_ms", "recompute_ms", "install_ms"))
                    totals.append(total)
                    out.append(figure(f"switch {f['switch']} killed, {schemes.kind(algorithm)}",
                                      total, "ms", link_mbps=a.switchfail_bw,
                                      scale=f"fat-tree k=4, 8 workers x {a.reroute_elements:,} int32",
                                      link_bound=None, exact=r["exact"],
                                      detail=" / ".join(f"{k[:-3]} {f.get(k)}" for k in TIMES if f.get(k) is not None) + " ms",
                                      **{k: f.get(k) for k in TIMES}))
                    s.restart_switch(f["switch"])
    if totals:
        out.append(figure("switch failure median (kill to new trees installed)", statistics.median(totals), "ms",
                          scale=f"{len(totals)} kills above", link_bound=None))
    return out


def bench_policer(a) -> list[dict]:
    """The port policer (controller/policer.py): a host in no job, on an unshaped link, sends
    100,000 frames as fast as it can at one software switch while a job of 4 workers at
    20 Mb/s runs allreduce after allreduce; the job's rate under the flood over its rate
    alone, both in the same run (emulation/fuzzing.py), with the policer and without."""
    from emulation.fuzzing import run

    out = []
    for police in (True, False):
        runs = [run(a.policer_frames, None, workers=4, elements=200_000, bw=20.0, baseline=3, seed=i, police=police)
                for i in range(a.policer_runs)]
        ratios = [r["during_vs_alone"] or 0.0 for r in runs]
        ratio, r = statistics.median(ratios), runs[0]
        out.append(figure(f"job rate under a flood / alone, policer {'on' if police else 'off'} "
                          f"(median of {len(runs)})", ratio, "x", runs=ratios,
                          target=">= 0.9" if police else None, met=ratio >= 0.9 if police else None,
                          link_mbps=20.0, scale=f"1 switch, 4 workers x 200,000 int32, {r['fuzzer']['sent']:,} "
                          f"frames at {r['fuzzer']['rate_fps']:,} frames/s from a host in no job (unshaped)",
                          link_bound=None, exact=all(x["alone"]["exact"] and x["during"]["exact"] for x in runs),
                          policed=r["policed"], rejects=r["rejects"], rejects_match=all(x["rejects_match"] for x in runs),
                          detail=f"alone {r['alone']['job_frames_per_s']:,} job frames/s at best; "
                          f"{r['during']['allreduces']} allreduces under the flood"))
    return out


def bench_chaos(a) -> list[dict]:
    """The seeded fault schedule (emulation/chaos.py) over a.chaos_seeds seeds, one network:
    two jobs of 4 workers on a k=4 fat-tree, each allreduce under its seed's faults. Prints
    each seed's line and the distribution: how many seeds ended with every job exact, with a
    clean partition error, or otherwise; the faults struck and skipped by kind; the time from a
    fault to the last job's new epoch (recovered_ms) and to the probe's or watcher's detection;
    and what was left down afterwards."""
    from emulation.session import Session
    from ground.runspec import RunSpec

    spec = RunSpec(topology="fattree", k=4, workers=4, jobs=2, elements=a.chaos_elements, seed=2, give_up=20)
    outcomes = {"exact": 0, "partitioned": 0, "other": 0}
    struck: dict[str, int] = {}
    skipped = 0
    recovered, detect, left = [], {}, []
    with Session(spec) as s:
        for seed in range(a.chaos_seeds):
            try:
                r = s.allreduce(chaos=seed)
            except Exception as exc:  # noqa: BLE001 - counted and shown: one seed must not lose the others
                outcomes["other"] += 1
                print(f"  seed {seed}: other; the allreduce raised {type(exc).__name__}: "
                      f"{str(exc).splitlines()[0][:200]}", flush=True)
                continue
            kinds = []
            for j in r["jobs"]:
                errors = j.get("errors") or []
                kinds.append("exact" if j["exact"] else "partitioned" if errors and all(
                    "partition" in e.lower() for e in errors) else "other")
            outcome = "other" if "other" in kinds else "partitioned" if "partitioned" in kinds else "exact"
            outcomes[outcome] += 1
            for f in r["failures"]:
                if "skipped" in f:
                    skipped += 1
                    continue
                struck[f["kind"]] = struck.get(f["kind"], 0) + 1
                if f.get("detect_ms") is not None:
                    detect.setdefault(f["kind"], []).append(f["detect_ms"])
                recovered += [j["recovered_ms"] for j in f.get("jobs", []) if j.get("recovered_ms") is not None]
            gone = {k: v for k, v in r["chaos"]["left"].items() if v}
            if gone:
                left.append({"seed": seed, **gone})
            print(f"  seed {seed}: {outcome}; " + ", ".join(
                f"{f['kind']} {f['target']}" + (" (skipped)" if "skipped" in f else "") for f in r["failures"])
                + ("; " + " | ".join(e[:160] for j in r["jobs"] for e in (j.get("errors") or [])[:1])
                   if outcome == "other" else ""), flush=True)
    scale = f"k=4 fat-tree, 2 jobs x 4 workers x {a.chaos_elements:,} int32, unshaped, {a.chaos_seeds} seeds"
    n = a.chaos_seeds
    out = [figure("chaos seeds ending exact or cleanly partitioned", outcomes["exact"] + outcomes["partitioned"],
                  f"of {n}", target=f"{n} of {n}", met=outcomes["other"] == 0, scale=scale, link_bound=None,
                  outcomes=outcomes, detail=f"{outcomes['exact']} exact, {outcomes['partitioned']} partitioned, "
                  f"{outcomes['other']} other"),
           figure("chaos: what was left down after the runs", len(left), "seeds", target="0", met=not left,
                  scale=scale, link_bound=None, left=left),
           figure("chaos: faults struck", sum(struck.values()), "faults", scale=scale, link_bound=None,
                  by_kind=struck, skipped=skipped,
                  detail=", ".join(f"{k} {v}" for k, v in sorted(struck.items())) + f"; {skipped} skipped")]
    if recovered:
        q = np.percentile(recovered, [50, 90, 100])
        out.append(figure("chaos: fault to the last job's new epoch", float(q[0]), "ms (median)", scale=scale,
                          link_bound=None, detail=f"p90 {q[1]:.0f} ms, max {q[2]:.0f} ms over {len(recovered)} "
                          "job reroutes"))
    for kind, values in sorted(detect.items()):
        out.append(figure(f"chaos: {kind} detected", statistics.median(values), "ms (median)", scale=scale,
                          link_bound=None, detail=f"max {max(values):.0f} ms over {len(values)}"))
    return out


def bench_build(_a) -> list[dict]:
    """The k=8 fat-tree built and programmed, with its steps: the network's (node shells,
    links, switch processes, host set-up, switches answering) and the controller's
    (standby trees' process, forwarding, drop simulators, the job's trees, link and switch
    watchers); then one allreduce and the teardown."""
    from emulation.session import Session
    from ground.runspec import RunSpec

    session = Session(RunSpec(topology="fattree", k=8, workers=16, elements=10_000))
    t0 = time.monotonic()
    session.start()
    built = time.monotonic() - t0
    try:
        r = session.allreduce()
    finally:
        t1 = time.monotonic()
        session.stop()
        teardown = time.monotonic() - t1
    network, controller = session.net.phases, session.phases
    return [figure("k=8 fat-tree built and programmed", built, "s", target="< 15 s", met=built < 15,
                   scale="80 switches, 16 workers", link_bound=None,
                   detail=f"network {sum(network.values()):.1f} s ({network.text()}); controller "
                          f"{sum(controller.values()):.1f} s ({controller.text()}); teardown {teardown:.1f} s, "
                          f"allreduce {r['seconds']} s",
                   network_phases=dict(network), controller_phases=dict(controller),
                   teardown_s=round(teardown, 2), allreduce_s=r["seconds"], exact=r["exact"])]


def sparse_ceiling(elements: int, density: float, pattern: str = "overlap",
                   window: int | None = None) -> tuple[float, int, int]:
    """What bounds the speed-up before any CPU does: frames per worker link, each way.
    Dense sends ceil(elements/K); sparse sends the dense lead round (one frame per slot, S),
    then the blocks of hosts/sparse_blocks.sent_blocks (the announced non-zero blocks and
    look-ahead blocks; the first of each column is announced in the lead), and receives one
    result per round (with `overlap` every worker's blocks are the same: rounds = its sends).
    Returns (ceiling, sparse frames, dense frames)."""
    from ground.runspec import RunSpec
    from hosts.gradients import gradient_for
    from hosts.sparse_agent import DEFAULT_LOOKAHEAD
    from hosts.sparse_blocks import announcements, nonzero_kblocks, sent_blocks

    spec = RunSpec(workers=8, elements=elements, algorithm="omnireduce", density=density, pattern=pattern,
                   window=window)
    S, blocks = spec.default_window(), -(-elements // wire.K)
    rows = np.zeros(blocks * wire.K, dtype=np.int64)
    rows[:elements] = gradient_for(spec, 0)
    mask = nonzero_kblocks(rows.reshape(blocks, wire.K), wire.K)
    frames = S + len(sent_blocks(mask, announcements(mask, min(S, blocks), DEFAULT_LOOKAHEAD), min(S, blocks)))
    return blocks / frames, frames, blocks


def bench_sparse(a) -> list[dict]:
    from emulation.session import run_allreduce

    common = dict(workers=8, elements=a.elements, bw=5.0, pattern="overlap")
    dense = _checked(run_allreduce(algorithm="switchml", density=0.1, **common))   # dense time: density-free
    ideal = wire_seconds(a.elements, 5.0)
    out = []
    from ground.runspec import RunSpec

    sparse_window = RunSpec(algorithm="omnireduce", elements=a.elements, window=a.sparse_window).default_window()
    for density, want in ((0.1, 9), (0.01, 50)):
        sparse = _checked(run_allreduce(algorithm="omnireduce", density=density, window=a.sparse_window, **common))
        speedup = dense["seconds"] / sparse["seconds"]
        ceiling, frames, blocks = sparse_ceiling(a.elements, density, window=a.sparse_window)
        sparse_wire = frames * wire.FRAME_BYTES * 8 / 5e6
        out.append(figure(f"sparse speed-up at density {density}", speedup, "x",
                          target=f">= {want}x (ideal {1 / density:g}x)", met=speedup >= want, link_mbps=5.0,
                          scale=f"8 workers x {a.elements:,} int32, one switch, overlapping blocks, "
                                f"sparse window {sparse_window}",
                          link_bound=dense["seconds"] <= LINK_BOUND * ideal,
                          dense_s=dense["seconds"], sparse_s=sparse["seconds"],
                          detail=f"dense {dense['seconds']} s, sparse {sparse['seconds']} s; protocol "
                                 f"ceiling {ceiling:.1f}x ({frames:,} frames per worker link each way "
                                 f"vs {blocks:,} dense); sparse {sparse['seconds'] / sparse_wire:.2f}x its "
                                 f"own wire time, {(sparse.get('fidelity') or {}).get('reason', '')}",
                          ceiling_x=round(ceiling, 2), sparse_frames=frames,
                          dense_x_analytic=round(dense["seconds"] / ideal, 3),
                          sparse_x_wire=round(sparse["seconds"] / sparse_wire, 3),
                          sparse_fidelity=sparse.get("fidelity"),
                          blocks_sent=sparse.get("blocks_sent"),
                          exact=dense["exact"] and sparse["exact"]))
    return out


def bench_trees(_a) -> list[dict]:
    """Tree computation time per topology and algorithm (controller/trees/bench.py), each a
    figure in the JSON (informational: no target)."""
    res = subprocess.run([sys.executable, "-m", "controller.trees.bench", "--json"], cwd=REPO, check=True,
                         capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=str(REPO)),
                         preexec_fn=lifeline.preexec(bound_to_thread=True))
    rows = [json.loads(line) for line in res.stdout.splitlines() if line.strip()]
    return [figure(f"trees {r['algorithm']} on {r['topology']}, {r['workers']} workers", r["ms"], "ms",
                   scale=f"{r['trees']} tree(s), median of the repeats", trees=r["trees"]) for r in rows]


def bench_bmv2(a) -> list[dict]:
    """Each simple_switch build and the twin under the same closed-loop load (agglab/bench_bmv2.py)."""
    from agglab.bench_bmv2 import section

    return section(a, figure)


BENCHES = {"pipeline": bench_pipeline, "daemon": bench_daemon, "wire": bench_wire, "wide": bench_wide,
           "reroute": bench_reroute, "switchfail": bench_switchfail, "policer": bench_policer, "chaos": bench_chaos,
           "build": bench_build, "sparse": bench_sparse, "trees": bench_trees,
           "bmv2": bench_bmv2, "bmv2-reroute": bench_bmv2_reroute}


# ---- output ------------------------------------------------------------------------------
def show(f: dict, previous: dict | None = None) -> str:
    parts = [f"{f['name']}: {_num(f['value'])} {f['unit']}"]
    if f["target"]:
        parts.append(f"[target {f['target']}: {'MET' if f['met'] else 'not met'}]")
    link = f"{f['link_mbps']:g} Mb/s links" if f["link_mbps"] else f.get("links") or "unshaped links"
    bound = {True: "link-bound", False: "CPU-bound", None: "link-bound n/a"}[f["link_bound"]]
    parts.append(f"({link}; {f['scale']}; {bound})")
    if f.get("detail"):
        parts.append(f"- {f['detail']}")
    if previous is not None and isinstance(previous.get("value"), (int, float)) and previous["value"]:
        parts.append(f"was {_num(previous['value'])} ({f['value'] / previous['value'] - 1:+.0%})")
    return " ".join(parts)


def _num(v: float) -> str:
    return f"{v:,.0f}" if abs(v) >= 100 else f"{v:.3g}"


def environment() -> dict:
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True,
                                text=True).stdout.strip()
    except OSError:
        commit = ""
    return {"time": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "host": platform.node(), "cpus": os.cpu_count(),
            "load_average": [round(x, 2) for x in os.getloadavg()], "commit": commit,
            "python": platform.python_version(), "values_per_packet": wire.K}


def cpu_reference_seconds() -> float:
    """CPU seconds of a fixed pure-Python loop (the best of three): how fast this machine's
    CPU is right now. Why: on a shared virtual machine the same loop was measured taking
    0.23-0.36 s minute to minute with nothing else running, and every figure here that is
    CPU-bound moves with it; the JSON keeps it beside the load average, per section."""
    best = float("inf")
    for _ in range(3):
        t0, x = time.process_time(), 0
        for i in range(1_000_000):
            x += i
        best = min(best, time.process_time() - t0)
    return round(best, 4)


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m agglab.bench", description=__doc__.splitlines()[0])
    ap.add_argument("--only", default=",".join(SECTIONS),
                    help=f"comma-separated sections (default all): {', '.join(SECTIONS)}")
    ap.add_argument("--elements", type=int, default=1_000_000, help="int32 per worker (wire, sparse)")
    ap.add_argument("--rates", default="5,10,20,40", help="link rates of the wire section, Mb/s")
    ap.add_argument("--wide-rates", default="20,40,80", help="link rates of the wide section, Mb/s")
    ap.add_argument("--reroute-elements", type=int, default=200_000,
                    help="int32 per worker of the reroute and switchfail runs (default 200000)")
    ap.add_argument("--bmv2-reroute-runs", type=int, default=3, help="runs per pipeline (bmv2-reroute)")
    ap.add_argument("--switchfail-kills", type=int, default=3, help="kills per pipeline (switchfail)")
    ap.add_argument("--switchfail-bw", type=float, default=None, help="link Mb/s (switchfail; default unshaped)")
    ap.add_argument("--daemon-seconds", type=float, default=5.0,
                    help="seconds the daemon section's senders run (default 5)")
    ap.add_argument("--policer-frames", type=int, default=100_000, help="flood frames (policer)")
    ap.add_argument("--policer-runs", type=int, default=3, help="runs with and without the policer (policer)")
    ap.add_argument("--chaos-seeds", type=int, default=20, help="seeds of the fault schedule (chaos)")
    ap.add_argument("--chaos-elements", type=int, default=60_000, help="int32 per worker (chaos)")
    ap.add_argument("--sparse-window", type=int, default=None,
                    help="slots per worker of the sparse runs (default the run default, ground/runspec.py "
                         "SPARSE_WINDOW): each slot "
                         "is a column whose lead round is sent whatever the density")
    ap.add_argument("--out", type=Path, help="JSON file (default results/bench/<time>.json)")
    ap.add_argument("--compare", type=Path, metavar="PREV.json", help="print each figure's change since PREV")
    return ap


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = build_parser()
    a = ap.parse_args(argv)
    a.sections = [s.strip() for s in a.only.split(",") if s.strip()]
    unknown = [s for s in a.sections if s not in SECTIONS]
    try:
        a.rates = [float(r) for r in a.rates.split(",")]
    except ValueError:
        unknown.append(f"--rates {a.rates}")
    try:
        a.wide_rates = [float(r) for r in a.wide_rates.split(",")]
    except ValueError:
        unknown.append(f"--wide-rates {a.wide_rates}")
    if a.sparse_window is not None and not 1 <= a.sparse_window <= wire.SLOTS:
        unknown.append(f"--sparse-window {a.sparse_window}")
    if unknown or a.elements < 1 or any(r <= 0 for r in (a.rates or [1]) + (a.wide_rates or [1])):
        ap.exit(2, f"agglab bench: bad arguments {unknown or [a.elements]}; sections are {', '.join(SECTIONS)}\n")
    if a.compare and not a.compare.is_file():
        ap.exit(2, f"agglab bench: --compare {a.compare}: no such file\n")
    return a


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    previous = {}
    if a.compare:
        try:
            previous = {f["name"]: f for f in json.loads(a.compare.read_text())["figures"]}
        except (ValueError, KeyError, TypeError) as exc:
            print(f"agglab bench: --compare {a.compare} is not a bench result ({exc})", file=sys.stderr)
            return 2
    if os.geteuid() == 0 and any(s in ROOT_SECTIONS for s in a.sections):
        try:                                         # its network sections would each be refused
            netlease.refuse_if_busy()
        except netlease.NetworkBusy as exc:
            print(f"agglab bench: {exc}", file=sys.stderr)
            return exc.exit_code
    report = {**environment(), "figures": [], "skipped": []}
    for section in a.sections:
        if section in ROOT_SECTIONS and os.geteuid() != 0:
            report["skipped"].append({"section": section, "why": "needs root"})
            print(f"\n== {section}: skipped (needs root)", flush=True)
            continue
        cpu_ref = cpu_reference_seconds()
        print(f"\n== {section} (CPU reference loop {cpu_ref * 1e3:.0f} ms)", flush=True)
        t0 = time.monotonic()
        try:
            figures = BENCHES[section](a)
        except Exception as exc:                     # one broken section must not lose the others
            report["skipped"].append({"section": section, "why": f"{type(exc).__name__}: {exc}"})
            print(f"{section} failed: {type(exc).__name__}: {exc}", flush=True)
            continue
        for f in figures:
            f["section"] = section
            f["cpu_reference_s"] = cpu_ref
            print(show(f, previous.get(f["name"])), flush=True)
        report["figures"] += figures
        print(f"({section}: {time.monotonic() - t0:.0f} s)", flush=True)
    report["load_average_end"] = [round(x, 2) for x in os.getloadavg()]
    out = a.out or RESULTS / "bench" / f"{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1) + "\n")
    targets = [f for f in report["figures"] if f["target"]]
    print(f"\n{sum(bool(f['met']) for f in targets)} of {len(targets)} targets met; "
          f"load average {report['load_average']} at the start, {report['load_average_end']} at the end, "
          f"on {report['cpus']} CPUs; written to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
