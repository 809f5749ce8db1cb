"""The `policer` and `chaos` sections: a job's speed and outcome under hostile traffic and seeded faults.

Why together: both measure what the network keeps of a job when something other than the job
acts on it (a flooding host in no job; emulation/chaos.py's fault schedule), and
docs/guide/faults.md reports them side by side.
"""

from __future__ import annotations

import statistics

import numpy as np

from agglab.bench.figures import figure
from agglab.ground.runspec import RunSpec


def bench_policer(a) -> list[dict]:
    """The port policer (controller/policer.py): a host in no job, on an unshaped link, sends
    100,000 frames as fast as it can at one software switch while a job of 4 workers at
    20 Mb/s runs allreduce after allreduce; the job's rate under the flood over its rate
    alone, both in the same run (emulation/fuzzing.py), with the policer and without."""
    from agglab.emulation.fuzzing import run  # lazy: loads networkx, PyYAML, pyroute2, only bench_policer() needs it

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
    from agglab.emulation.session import Session  # lazy: loads networkx, PyYAML, pyroute2, only bench_chaos() needs it

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
