"""The `reroute`, `switchfail` and `bmv2-reroute` sections: from a failure to new trees installed.

Why together: each fails a tree link or kills a tree switch mid-run on a k=4 fat-tree and
reports the same phases (detect, recompute, install, and the install's own steps from
agglab.controller.reroute.record.REROUTE_PHASES), for the software twin and for BMv2.
"""

from __future__ import annotations

import statistics

from agglab.bench.figures import NO_BMV2, SectionSkipped, figure
from agglab.controller.bmv2_tools import find_bmv2_tool
from agglab.ground import schemes
from agglab.ground.runspec import RunSpec


def _phases() -> tuple[str, ...]:
    """The figures of a reroute: its total's parts, then agglab.controller.reroute.record.REROUTE_PHASES."""
    from agglab.controller.reroute.record import REROUTE_PHASES  # lazy: loads numpy, networkx, only _phases() needs it

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
    from agglab.emulation.session import run_allreduce  # lazy: loads numpy, networkx, PyYAML, pyroute2, only bench_reroute() needs it

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


def bench_switchfail(a) -> list[dict]:
    """Switch-failure recovery on one k=4 fat-tree: per kill, kill to exit seen (detect), trees
    recomputed, installed (freeze, snapshot, entries, preload), while 8 workers run an
    allreduce of a.reroute_elements int32 each on unshaped links (the load)."""
    from agglab.emulation.session import Session  # lazy: loads numpy, networkx, PyYAML, pyroute2, only bench_switchfail() needs it

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


def bench_bmv2_reroute(a) -> list[dict]:
    """BMv2's reroute: a rat tree link fails mid-run on a k=4 fat-tree of BMv2 switches, dense and
    sparse, `--bmv2-reroute-runs` times each; every run must be exact, and the install (freeze,
    snapshot, entries, preload) should stay under 250 ms."""
    from agglab.emulation.session import run_allreduce  # lazy: loads numpy, networkx, PyYAML, pyroute2, only bench_bmv2_reroute() needs it

    if not (find_bmv2_tool("simple_switch") and find_bmv2_tool("p4c")):
        raise SectionSkipped(NO_BMV2)
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
