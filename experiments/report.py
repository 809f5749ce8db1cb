"""report.md: per trend our figure beside the paper's claim, a verdict, plots, and how
faithful every run was.

Why the fidelity of every run is in the report: a time the emulator's CPU decided, not
the links, would make any verdict meaningless; the report names the machine, the
calibrated ceiling, the scale factor of each trend and, per run, the bottleneck link's
utilisation and whether the run was flagged CPU-bound.
"""

from __future__ import annotations

import os
import platform
import statistics
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING

from agglab.experiments.jobs_report import jobs_table
from agglab.experiments.analysis import real_seconds, scale_groups, select, series_table, verdicts
from agglab.experiments.backends import BACKENDS, side_by_side, twin_results
from agglab.experiments.runner import trend_rates, twin_dir
from agglab.ground import wire
from agglab.experiments.paper_figures import ring_vs_innet
from agglab.experiments.plots import write_plots
from agglab.experiments.where_report import section as where_section
from agglab.experiments.units import DELAY_NOTE, format_rate, format_size, format_time, parse_rate, parse_size

if TYPE_CHECKING:
    from agglab.experiments.runner import Outcome

REPO = Path(__file__).resolve().parent.parent
BACKEND_NAMES = {"soft": "the software twin (soft)", "bmv2": "BMv2 simple_switch (bmv2)"}

TIMING_NOTE = (
    "Every time in this report is in the **real network's units**: the emulated time times "
    "z/s, where s divides every link rate (to bring the fastest link to this machine's "
    "fidelity ceiling) and z shrinks the gradient (to keep runs short). The conversion holds "
    "for bandwidth-bound runs; start-up and per-packet latencies do not scale and inflate "
    "small points. A run whose bottleneck link was under 90% busy while a process or the "
    "machine was saturated is flagged CPU-bound; its time measures the emulator.")


def _read(path: str) -> str:
    try:
        return Path(path).read_text()
    except OSError:
        return ""


def _cpu_model() -> str:
    for line in _read("/proc/cpuinfo").splitlines():
        if line.lower().startswith(("model name", "hardware", "cpu model")):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def _memory() -> str:
    for line in _read("/proc/meminfo").splitlines():
        if line.startswith("MemTotal:"):
            return format_size(int(line.split()[1]) * 1024)
    return "unknown"


def _git_commit() -> str:
    try:
        head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True, timeout=5, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=5).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown (not a git checkout)"
    return f"{head} (with uncommitted changes)" if dirty else head


def _loadavg() -> str:
    try:
        return " / ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "unknown"


def machine_facts() -> dict[str, str]:
    """Facts that decide how emulator timings can be read; taken before the first run."""
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:
        usable = os.cpu_count() or 0
    return {
        "cores": f"{os.cpu_count()} ({usable} usable by this process)",
        "cpu": _cpu_model(),
        "memory": _memory(),
        "kernel": f"{platform.system()} {platform.release()}",
        "os": platform.platform(),
        "python": platform.python_version(),
        "values per packet (AGGLAB_K)": str(wire.K),
        "agglab commit": _git_commit(),
        "load average (1/5/15 min) before": _loadavg(),
    }


def _cell(text: str, limit: int) -> str:
    """Free text (an error message) as one table cell: one line, no column separators."""
    return " ".join(str(text).split()).replace("|", "/")[:limit]


def _num(x: float, spec: str = ".3g") -> str:
    return "–" if x != x else format(x, spec)


def _range(v) -> str:
    return "–" if v.ours != v.ours else f"{_num(v.ours)} ({_num(v.low)}–{_num(v.high)})"


def _trend_rows(outcome: "Outcome") -> list[str]:
    """The summary table: one line per claim of every trend."""
    lines = ["| trend | claim | paper | bound (this network) | ours (min–max) | ours/paper | verdict | "
             "ours vs bound | why, when it does not hold |",
             "|---|---|---:|---:|---:|---:|---|---|---|"]
    for d in outcome.suite.definitions:
        for v in verdicts(outcome.rows, d):
            verdict = v.verdict + (f" — {v.flagged} CPU-bound run(s) involved" if v.flagged else "")
            if v.missing:
                verdict += f" ({_cell(v.missing, 120)})"
            lines.append(f"| {d.name} | {v.claim.text} | {_num(v.claim.paper)} ({v.claim.expect.replace('_', ' ')}) | "
                         f"{_bound(v)} | {_range(v)} | {_num(v.ratio, '.2f')} | {verdict} | {v.against_bound} | {_why(v)} |")
    return lines


def _bound(v) -> str:
    """This network's analytic bound on the claim's ratio (experiments/bounds.py), or why none."""
    return _num(v.bound) if v.bound == v.bound else f"– ({_cell(v.no_bound, 80)})" if v.no_bound else "–"


BOUND_NOTE = (
    "*Bound (this network)*: the ratio this network allows on its own topology, link rates and bytes "
    "(emulation/wire_model.py: every link direction's wire bytes over its rate, the busiest deciding; trees, "
    "routes and sparse blocks recomputed as the run uses them; PACE: the iteration model with the measured "
    "alpha and beta). *Ours vs bound*: \"matches its bound\" within 10%, else by how much it misses it.")


def _why(v) -> str:
    """The reasons a claim falls short, as far as the report knows them: its runs were
    CPU-bound (their times measure the emulator), and the definition's `why`."""
    if v.verdict.startswith("holds") or v.verdict in ("no data", "not measured"):
        return ""
    reasons = []
    if v.flagged:
        reasons.append(f"{v.flagged} of its runs CPU-bound: those times measure the emulator")
    if v.claim.why:
        reasons.append(v.claim.why)
    return _cell("; ".join(reasons), 600)


def _scale_line(outcome: "Outcome", d) -> str:
    rows = [r for r in outcome.rows if r["definition"] == d.name]
    if not rows:
        return "not run"
    if d.program == "pace":
        return _pace_scale(rows, d)
    s, z = rows[0]["scale_rate"], rows[0]["scale_size"]
    link = parse_rate(d.network["link"])
    return (f"real {format_rate(link)} links and a {format_size(parse_size(d.network['gradient']))} gradient; "
            f"emulated at {format_rate(link / s)} (rates / {s:.6g}) with a "
            f"{format_size(parse_size(d.network['gradient']) / z)} gradient (/ {z:.6g}); "
            f"real time = emulated time x {z / s:.4g}")


def _pace_scale(rows: list[dict], d) -> str:
    """program: pace - one scale per model (its gradient over the emulated one)."""
    link = parse_rate(d.network["link"])
    per = {}
    for r in rows:
        per.setdefault(r["values"].get("model"), (r["scale_rate"], r["scale_size"]))
    parts = [f"{m}: {format_size(z * d.emulated_bytes)} gradient / {z:.4g}, real time = emulated x {z / s:.4g}"
             for m, (s, z) in per.items()]
    s = next(iter(per.values()))[0]
    return (f"real {format_rate(link)} links emulated at {format_rate(link / s)} (rates / {s:.6g}); each worker "
            f"sends {format_size(d.emulated_bytes)} per iteration through the emulator; " + "; ".join(parts))


def _pace_table(outcome: "Outcome", d) -> list[str]:
    """program: pace - per model: both schedulers' iteration through the emulator beside the
    pure model's (pace/schedule.py with the modelled real network), and the scale."""
    lines = ["Per model (medians over repeats; real-network ms). *Pure model*: the same schedulers "
             "on the modelled network (alpha + beta*s of a 10 Gb/s link), no emulator.", "",
             "| model | compute ms | FIFO ms | PACE ms | speed-up | pure-model FIFO / PACE ms | pure-model speed-up "
             "| scale s | shrink z | emulated cost (real units) | link-bound runs |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|"]
    for model in d.sweep.get("model", []):
        rows = [r for r in outcome.rows if r["definition"] == d.name and r.get("ok")
                and r["values"].get("model") == model and r.get("pace")]
        by = {s: [r for r in rows if r["series"] == s] for s in ("fifo", "pace")}
        if not by["fifo"] or not by["pace"]:
            lines.append(f"| {model} | – | – | – | – | – | – | – | – | – | – |")
            continue
        med = {s: statistics.median(real_seconds(r) * 1e3 for r in rs) for s, rs in by.items()}
        p = by["fifo"][0]["pace"]
        pure = {s: by[s][0]["pace"].get("model_iteration_ms") for s in by}
        cost, model_cost = p.get("emulated_cost") or {}, p.get("model_cost") or {}
        bound = sum(1 for r in rows if (r.get("fidelity") or {}).get("link_bound"))
        lines.append(f"| {model} | {p.get('compute_ms')} | {med['fifo']:.1f} | {med['pace']:.1f} | "
                     f"{med['fifo'] / med['pace']:.3f} | {pure['fifo']} / {pure['pace']} | {p.get('model_speedup')} | "
                     f"{p.get('scale')} | {p.get('shrink')} | alpha {cost.get('alpha_ms')} ms + "
                     f"{cost.get('ms_per_mb')} ms/MB (model: {model_cost.get('alpha_ms', '–')} ms + "
                     f"{model_cost.get('ms_per_mb', '–')} ms/MB) | {bound}/{len(rows)} |")
    return lines + [""]


def _trend_section(outcome: "Outcome", d, plots: list[Path]) -> list[str]:
    lines = [f"## {d.title}", "", f"**Paper:** {d.paper}. **Claim:** {d.claim}", "",
             f"**Scale:** {_scale_line(outcome, d)}.", ""]
    if "delay" in d.network:
        lines += [f"**Delay:** {d.network['delay']} real; {DELAY_NOTE}.", ""]
    if d.notes:
        lines += [d.notes, ""]
    lines += ["| claim | paper | bound (this network) | ours (min–max) | ours/paper | verdict | ours vs bound | "
              "why, when it does not hold |",
              "|---|---:|---:|---:|---:|---|---|---|"]
    for v in verdicts(outcome.rows, d):
        flag = f"; {v.flagged} CPU-bound run(s) involved" if v.flagged else ""
        lines.append(f"| {v.claim.text} | {_num(v.claim.paper)} | {_bound(v)} | {_range(v)} | "
                     f"{_num(v.ratio, '.2f')} | {v.verdict}{flag}{' (' + _cell(v.missing, 150) + ')' if v.missing else ''} "
                     f"| {v.against_bound} | {_why(v)} |")
    if d.plot == "scale":
        lines += [""] + scale_table(outcome.rows, d)
    lines += ["", "Medians in real-network time (min–max); `flagged` = runs flagged CPU-bound.", "",
              "| series | point | time (real) | runs | flagged | failed |", "|---|---|---:|---:|---:|---:|"]
    for series, combo, st in series_table(outcome.rows, d):
        point = " ".join(f"{k}={v}" for k, v in combo.items())
        t = (f"{format_time(st.median)} ({format_time(st.low)}–{format_time(st.high)})" if st.runs
             else f"– ({_cell(st.error, 100)})")
        lines.append(f"| {series} | {point} | {t} | {st.runs} | {st.flagged} | {st.failed} |")
    lines.append("")
    lines += jobs_table(outcome.rows, d)          # jobs that train: iterations/s per job
    if d.program == "pace":
        lines += _pace_table(outcome, d)
    for p in plots:
        lines += [f"![{p.name}]({p.name})", ""]
    if any(st.flagged for _, _, st in series_table(outcome.rows, d)):
        lines += ["Red crosses in the plots mark medians with CPU-bound (flagged) runs: those times "
                  "measure the emulator, not the network.", ""]
    return lines


def scale_table(rows: list[dict], d) -> list[str]:
    """A per-scale trend's claims as one row each: at every size of d.x, our ratio beside
    this network's bound, and the paper's figure (the table a reader compares with the
    paper's figure of ratio against scale)."""
    groups = scale_groups(rows, d)
    sizes = d.sweep[d.x]
    lines = [f"Ratio vs {d.x}: ours / this network's bound at each size (ours: median ratio; – not run).", "",
             "| claim | paper | " + " | ".join(f"{d.x}={x}: ours / bound" for x in sizes) + " |",
             "|---|---:|" + "---:|" * len(sizes)]
    for text, vs in groups.items():
        at = {v.claim.num[d.x]: v for v in vs}
        cells = [f"{_num(at[x].ours)} / {_num(at[x].bound)}" + (" (CPU-bound)" if at[x].flagged else "")
                 if x in at else "–" for x in sizes]
        lines.append(f"| {text} | {_num(vs[0].claim.paper)} | " + " | ".join(cells) + " |")
    return lines + [""]


def _ring_check(outcome: "Outcome") -> list[str]:
    """Measured ring / in-network at 8 workers beside 2(n-1)/n x the wire-efficiency ratio:
    over every run, and over the runs not flagged CPU-bound (the ones that measure the
    network; those should be within 10% of the analytic value, or the emulator is not faithful)."""
    out = []
    for d in outcome.suite.definitions:
        if "ring" not in d.series or "in-network" not in d.series or 8 not in d.sweep.get("workers", []):
            continue
        analytic = ring_vs_innet(8)
        out += ["## Ring vs in-network at 8 workers: measured vs analytic", "",
                f"Analytic: 2(n-1)/n x (in-network wire efficiency {wire.DATA_BYTES}/{wire.FRAME_BYTES}) / "
                f"(TCP's 1448/1514) = {analytic:.3f} at n = 8.", "",
                "| runs | ring runs | in-network runs | measured ring/in-network | analytic | measured/analytic | "
                "within 10% |", "|---|---:|---:|---:|---:|---:|---|"]
        for label, only in (("all", False), ("not flagged CPU-bound", True)):
            ring = select(outcome.rows, d, {"series": "ring", "workers": 8}, unflagged=only)
            innet = select(outcome.rows, d, {"series": "in-network", "workers": 8}, unflagged=only)
            measured = ring.median / innet.median if ring.runs and innet.runs else float("nan")
            within = ("–" if measured != measured else
                      ("yes" if abs(measured / analytic - 1) <= 0.1 else "no"))
            out.append(f"| {label} | {ring.runs} | {innet.runs} | {_num(measured)} | {analytic:.3f} | "
                       f"{_num(measured / analytic, '.2f')} | {within} |")
        out.append("")
    return out


def _fidelity(outcome: "Outcome") -> list[str]:
    lines = ["## Fidelity of every run", "",
             "Bottleneck = the link direction needing the most time at its configured rate; "
             "utilisation = its achieved rate over the time it carried data / configured rate. "
             "CPU shares are of one core over that window.", "",
             "| trend | point | rep | emulated s | real time | bottleneck | configured → achieved Mb/s | "
             "utilisation | max switch CPU | max worker CPU | machine busy | bound |",
             "|---|---|---:|---:|---:|---|---:|---:|---:|---:|---:|---|"]
    for r in sorted(outcome.rows, key=lambda r: (r["definition"], r["series"], str(r["values"]), r["repeat"])):
        point = f"{r['series']} " + " ".join(f"{k}={v}" for k, v in r["values"].items())
        if not r.get("ok"):
            lines.append(f"| {r['definition']} | {point} | {r['repeat'] + 1} | – | – | – | – | – | – | – | – | "
                         f"failed: {_cell(str(r.get('error', '')), 100)} |")
            continue
        f = r.get("fidelity") or {}
        link = f.get("link") or {}
        sw = max((f.get("switch_cpu") or {}).values(), default=float("nan"))
        bound = "**CPU-bound**" if f.get("cpu_bound") else ("link-bound" if f.get("link_bound") else "neither")
        lines.append(
            f"| {r['definition']} | {point} | {r['repeat'] + 1} | {r['seconds']:.2f} | {format_time(real_seconds(r))} | "
            f"{link.get('link', '–')} | {_num(link.get('configured_mbps') or float('nan'))} → "
            f"{_num(link.get('achieved_mbps', float('nan')))} | {_num(link.get('utilisation') or float('nan'), '.0%')} | "
            f"{_num(sw, '.0%')} | {_num(f.get('host_cpu_max', float('nan')), '.0%')} | "
            f"{_num(f.get('machine_busy', float('nan')), '.0%')} | {bound} |")
    return lines + [""]


def _host_tcp(rows: list[dict]) -> list[str]:
    """The hosts' TCP as the runs' records say it (read in the hosts' namespaces, ground/host_tcp.py):
    a row per distinct setting, with how many runs had it."""
    seen: dict[str, int] = {}
    for r in rows:
        t = r.get("host_tcp")
        if t:
            text = ("differs between hosts" if t.get("differ") else
                    f"{t['congestion_control']}, tcp_rmem {t['tcp_rmem']}, tcp_wmem {t['tcp_wmem']}, initcwnd {t['initcwnd']}")
            seen[text] = seen.get(text, 0) + 1
    return [f"| hosts' TCP (read in their namespaces) | {text} ({n} run{'s' if n > 1 else ''}) |"
            for text, n in seen.items()]


def suite_lines(outcome: "Outcome") -> list[str]:
    """Which suite ran (its name and file) on which backend, the suite's own `about` (why its
    sizes are what they are: the BMv2 suite's differ from the default's), and where the other
    backend's run of the same suite is, or the command that makes it: the side-by-side table
    compares a suite only with itself, so its soft ratios come from the same networks."""
    suite = outcome.suite
    lines = [f"Suite **{suite.name}** (`{suite.source}`) on backend **{suite.backend}**."
             + (f" {suite.about}" if suite.about else ""), ""]
    found = twin_results(outcome)
    if found is None:
        other = next(b for b in BACKENDS if b != suite.backend)
        folder = twin_dir(outcome.out_dir, suite.backend, other)
        source = Path(suite.source)
        named = source.stem if source.resolve().parent == REPO / "experiments" / "configs" else suite.source
        out = "" if outcome.out_dir.parent == Path("results") else f" --out {outcome.out_dir.parent}"
        lines += [f"No {other} run of this suite beside it ({folder}/): `agglab experiment {named} "
                  f"--backend {other}{out}` makes one; this command run again then adds each claim's "
                  f"{other} ratio beside this backend's (finished runs are kept).", ""]
    return lines


def render(outcome: "Outcome", facts: dict[str, str], plots: dict[str, list[Path]], where: list[str] = ()) -> str:
    suite = outcome.suite
    ok = sum(1 for r in outcome.rows if r.get("ok"))
    flagged = sum(1 for r in outcome.rows if r.get("ok") and (r.get("fidelity") or {}).get("cpu_bound"))
    state = " **Interrupted**: rerun the same command to resume." if outcome.interrupted else ""

    lines = [f"# agglab experiment `{suite.name}` on {BACKEND_NAMES.get(suite.backend, suite.backend)}", "",
             f"Backend: **{suite.backend}**. "
             f"{ok} of {len(outcome.rows)} recorded runs succeeded; {flagged} of them flagged CPU-bound.{state}", "",
             *suite_lines(outcome), "## Trends: ours vs the papers", ""] + _trend_rows(outcome) + ["", BOUND_NOTE, "", TIMING_NOTE, ""]
    lines += side_by_side(outcome)
    lines += ["## Machine and scale", "", "| fact | value |", "|---|---|"]
    lines += [f"| {k} | {v} |" for k, v in {"backend": suite.backend, **facts}.items()]

    own = trend_rates(suite)
    every = own and len(own) == len(suite.definitions) and not any(   # on BMv2 each names its shape
        text.startswith(f"{suite.ceiling_mbps:g} Mb/s") for text in own.values())
    lines += [f"| fastest emulated link{' (no trend ran at it)' if every else ''} | "
              f"{suite.ceiling_mbps:g} Mb/s — {suite.ceiling_source} |"]
    lines += [f"| fastest emulated link, {name} | {text} |" for name, text in own.items()]
    lines += [f"| definitions | {suite.source} |", *_host_tcp(outcome.rows), ""]
    lines += _ring_check(outcome)
    for d in suite.definitions:
        lines += _trend_section(outcome, d, plots.get(d.name, []))
    lines += list(where)                   # where each paper's figure appears (experiments/where_report.py)
    lines += _fidelity(outcome)
    return "\n".join(lines)


def write_report(outcome: "Outcome") -> Path:
    facts = {**machine_facts(), "load average (1/5/15 min) at report": _loadavg()}
    facts.pop("load average (1/5/15 min) before", None)
    plots = {d.name: write_plots(outcome.rows, d, outcome.out_dir) for d in outcome.suite.definitions}
    where = where_section(outcome, outcome.out_dir / "topologies", outcome.out_dir)
    path = outcome.out_dir / "report.md"
    path.write_text(render(outcome, facts, plots, where))
    return path
