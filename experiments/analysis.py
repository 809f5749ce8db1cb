"""From run rows to figures: medians per point, claim ratios and plain verdicts.

Why separate from the report's text: the verdict rules are the part a reader must be able
to check (and the tests pin), so they live in small functions with their thresholds named.
Times are converted to the real network's units here, once: real = emulated * z / s.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any

from agglab.experiments import bounds
from agglab.experiments.definition import Claim, Definition
from agglab.ground.runspec import RunSpec


def real_seconds(row: dict[str, Any]) -> float:
    return float(row["seconds"]) * float(row["scale_size"]) / float(row["scale_rate"])


def matches(row: dict[str, Any], selector: dict[str, Any], default_series: str) -> bool:
    if row["series"] != selector.get("series", default_series):
        return False
    return all(row["values"].get(k) == v for k, v in selector.items() if k != "series")


@dataclass
class Stat:
    median: float
    low: float
    high: float
    runs: int
    flagged: int          # cpu_bound runs among them
    failed: int
    error: str = ""


def stat(rows: list[dict[str, Any]]) -> Stat:
    good = [r for r in rows if r.get("ok")]
    times = [real_seconds(r) for r in good]
    flagged = sum(1 for r in good if (r.get("fidelity") or {}).get("cpu_bound"))
    errors = [r.get("error", "") for r in rows if not r.get("ok")]
    if not times:
        return Stat(float("nan"), float("nan"), float("nan"), 0, 0, len(rows), errors[0] if errors else "no runs")
    return Stat(statistics.median(times), min(times), max(times), len(good), flagged, len(rows) - len(good))


def flagged(row: dict[str, Any]) -> bool:
    return bool((row.get("fidelity") or {}).get("cpu_bound"))


def selected(rows: list[dict[str, Any]], d: Definition, selector: dict[str, Any],
             unflagged: bool = False) -> list[dict[str, Any]]:
    """Rows of the labelled points the selector names (only those not flagged CPU-bound
    with `unflagged`). Points that share a RunSpec share runs (ring serves every density),
    so the match goes through the planned points' keys when the definition was planned, and
    through the rows' own labels otherwise."""
    first = next(iter(d.series))
    mine = [r for r in rows if r["definition"] == d.name and not (unflagged and flagged(r))]
    if d.built:
        keys = {p.key for p in d.built if matches({"series": p.series, "values": p.values}, selector, first)}
        return [r for r in mine if r["key"] in keys]
    return [r for r in mine if matches(r, selector, first)]


def select(rows: list[dict[str, Any]], d: Definition, selector: dict[str, Any], unflagged: bool = False) -> Stat:
    """The Stat of `selected` rows."""
    return stat(selected(rows, d, selector, unflagged))


def specs(rows: list[dict[str, Any]], d: Definition, selector: dict[str, Any]) -> list[RunSpec]:
    """The RunSpecs of the points a selector names: the planned points', else the rows'. A
    failure picked at run time (`tree@F`) has no link until a run picks one: then each
    recorded run's spec with the link it failed (`resolved`), so the bound follows it."""
    if d.built:
        planned = [p.spec for p in planned_points(d, selector)]
    else:
        planned = [RunSpec.from_dict(r["spec"]) for r in selected(rows, d, selector) if r.get("spec")]
    if any(f.link is None for s in planned for f in s.fail_specs):
        runs = [spec for r in selected(rows, d, selector) if (spec := resolved(r)) is not None]
        return runs or planned
    return planned


def planned_points(d: Definition, selector: dict[str, Any]) -> list:
    """The planned points (`d.points` built them) a selector names that can run."""
    first = next(iter(d.series))
    return [p for p in d.built if p.spec is not None
            and matches({"series": p.series, "values": p.values}, selector, first)]


def resolved(row: dict[str, Any]) -> RunSpec | None:
    """A finished run's spec with its run-time failures (`tree@F`) replaced by the links it
    recorded failing (`A-B@F`, at the fraction it failed them); None without such a record."""
    links = [f for f in row.get("failures") or [] if f.get("link")]
    if not row.get("ok") or not row.get("spec") or not links:
        return None
    fails = [f for f in row["spec"].get("fail") or [] if not f.startswith("tree@")]
    return RunSpec.from_dict({**row["spec"], "fail": fails + [f"{f['link']}@{f['at']}" for f in links]})


def claim_bound(rows: list[dict[str, Any]], d: Definition, claim: Claim) -> tuple[float, str]:
    """(this network's bound on the claim's ratio, why there is none), experiments/bounds.py."""
    try:
        if claim.bound == "pace_model":
            return bounds.pace_model_bound(selected(rows, d, claim.num), selected(rows, d, claim.den)), ""
        if claim.bound == "training":
            return bounds.training_bound(specs(rows, d, claim.num), selected(rows, d, claim.num),
                                         specs(rows, d, claim.den), selected(rows, d, claim.den)), ""
        if claim.bound == "wire_time":
            return bounds.wire_time_bound(specs(rows, d, claim.num), specs(rows, d, claim.den)), ""
    except (bounds.BoundError, ValueError, KeyError, ZeroDivisionError, OSError) as exc:
        return float("nan"), str(exc)
    return float("nan"), "no bound in the trend file"


def planned_bound(d: Definition, claim: Claim) -> tuple[float, str]:
    """A planned claim's bound before any run (experiments/where.py sweeps it over a knob):
    the wire model's, as claim_bound gives it, and for PACE the pure iteration model at the
    points' modelled start-up cost, which no run has measured there."""
    if claim.bound != "pace_model":
        return claim_bound([], d, claim)
    try:
        return bounds.pace_pure_bound(planned_points(d, claim.num), planned_points(d, claim.den)), ""
    except (bounds.BoundError, ValueError, KeyError, ZeroDivisionError, OSError) as exc:
        return float("nan"), str(exc)


@dataclass
class Verdict:
    claim: Claim
    ours: float                     # median(num) / median(den)
    low: float                      # min(num)/max(den)
    high: float                     # max(num)/min(den)
    verdict: str
    flagged: int
    missing: str = ""
    bound: float = float("nan")     # this network's analytic bound on the ratio (experiments/bounds.py)
    no_bound: str = ""              # why there is none

    @property
    def ratio(self) -> float:
        return self.ours / self.claim.paper if self.claim.paper else float("nan")

    @property
    def against_bound(self) -> str:
        """'matches its bound' within 10%, else by how much it misses it."""
        return bounds.compare(self.ours, self.bound)


def judge(ours: float, paper: float, expect: str, tolerance: float) -> str:
    """holds / weaker / does not hold.

    at_least (a speed-up "A is P x faster"): holds at >= P(1-tol); weaker if A is still
    faster (> 1) but by less; else does not hold.  at_most (e.g. "flat": P = 1): holds at
    <= P(1+tol); weaker up to P(1+3 tol); else does not hold.  about: holds within tol of P
    either way; weaker if on the same side of 1 as P but short of it; does not hold if on
    the other side of 1 (or 1 itself when P is not)."""
    if ours != ours:                # NaN
        return "no data"
    if expect == "at_least":
        return "holds" if ours >= paper * (1 - tolerance) else ("weaker" if ours > 1 else "does not hold")
    if expect == "at_most":
        if ours <= paper * (1 + tolerance):
            return "holds"
        return "weaker" if ours <= paper * (1 + 3 * tolerance) else "does not hold"
    if abs(ours / paper - 1) <= tolerance:
        return "holds"
    if (ours - 1) * (paper - 1) > 0:
        return "holds (stronger)" if abs(ours - 1) > abs(paper - 1) else "weaker"
    return "does not hold"


def verdicts(rows: list[dict[str, Any]], d: Definition) -> list[Verdict]:
    out = []
    for claim, _ in d.claims():
        unswept = [f"{k}={v}" for sel in (claim.num, claim.den) for k, v in sel.items()
                   if k in d.sweep and v not in d.sweep[k]]
        if unswept:
            out.append(Verdict(claim, float("nan"), float("nan"), float("nan"), "not measured", 0,
                               f"{', '.join(unswept)} is not in this run's sweep"))
            continue
        num, den = select(rows, d, claim.num), select(rows, d, claim.den)
        bound, no_bound = claim_bound(rows, d, claim)
        if not num.runs or not den.runs:
            missing = (num.error or den.error or "no successful runs")
            out.append(Verdict(claim, float("nan"), float("nan"), float("nan"), "no data", 0, missing,
                               bound=bound, no_bound=no_bound))
            continue
        ours = num.median / den.median
        out.append(Verdict(claim, ours, num.low / den.high, num.high / den.low,
                           judge(ours, claim.paper, claim.expect, claim.tolerance), num.flagged + den.flagged,
                           bound=bound, no_bound=no_bound))
    return out


def series_table(rows: list[dict[str, Any]], d: Definition) -> list[tuple[str, dict[str, Any], Stat]]:
    """(series, sweep values, stat) for every labelled point, in definition order."""
    out = []
    for combo in d.combos():
        for s in d.series:
            out.append((s, combo, select(rows, d, {"series": s, **combo})))
    return out


def scale_groups(rows: list[dict], d: Definition) -> dict[str, list]:
    """A per-scale trend's verdicts by claim (its text before for_each), each in sweep order
    of d.x: one line of the scale plot and one row of the report's scale table."""
    groups: dict[str, list] = {}
    for v in verdicts(rows, d):
        if d.x in v.claim.num:
            groups.setdefault(v.claim.base or v.claim.text, []).append(v)
    return groups
