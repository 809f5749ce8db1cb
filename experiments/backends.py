"""Soft and BMv2 side by side: each claim's ratio on both backends beside its bound.

Why: the software twin is meant to behave as the P4 program on BMv2 does. A claim whose
ratio on the twin differs from BMv2's by more than the noise says one of them is not
measuring the network (the twin's pipeline, or a BMv2 switch short of CPU). The report
shows both whenever the same suite's results exist for the other backend beside its own
(results/<name> for soft, results/<name>-bmv2 for BMv2: `runner.results_name`).

How the other backend's rows are matched: its definitions are planned again as that
backend ran them (its own ceiling, so its points' keys), which finds runs shared by several
labelled points; a claim that still finds nothing (the calibration changed since those runs)
is matched by the rows' own labels (series and sweep values).
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agglab.experiments.analysis import Verdict, verdicts
from agglab.experiments.runner import (SOFT, Suite, ceiling, latest, load_rows, plan, twin_dir)

if TYPE_CHECKING:
    from agglab.experiments.runner import Outcome

BACKENDS = ("soft", "bmv2")
WITHIN = 0.10            # "agrees": the two ratios within 10% of each other


def other_suite(suite: Suite, backend: str) -> Suite:
    """`suite` as it would run on `backend`: the same definitions at that backend's ceiling."""
    other = copy.deepcopy(suite)
    other.backend = backend
    for d in other.definitions:
        d.run["backend"] = backend
        d.built = []
    if not suite.ceiling_source.startswith("fixed by"):
        other.ceiling_mbps, other.ceiling_source = ceiling(backend)
    return other


def twin_verdicts(suite: Suite, backend: str, rows: list[dict[str, Any]],
                  out_dir: Path) -> dict[str, list[Verdict]]:
    """`backend`'s verdicts per definition of `suite` from its `rows`, planned into `out_dir`
    (its results folder); a claim with no data there is matched again by the rows' labels."""
    other = other_suite(suite, backend)
    try:
        plan(other, out_dir)
    except Exception:  # noqa: BLE001 - a definition the other backend cannot plan: match by labels
        pass
    out = {}
    for d in other.definitions:
        planned = verdicts(rows, d)
        if any(v.verdict == "no data" for v in planned):
            d.built = []
            by_label = verdicts(rows, d)
            planned = [p if p.verdict != "no data" else q for p, q in zip(planned, by_label)]
        out[d.name] = planned
    return out


def twin_results(outcome: "Outcome") -> tuple[str, Path, dict[str, list[Verdict]]] | None:
    """(other backend, its folder, its verdicts per definition) when the same suite was run
    on the other backend, else None."""
    mine = outcome.suite.backend
    for other in BACKENDS:
        if other == mine:
            continue
        folder = twin_dir(outcome.out_dir, mine, other)
        rows = latest(load_rows(folder / "runs.jsonl"))
        if rows:
            return other, folder, twin_verdicts(outcome.suite, other, rows, folder)
    return None


def _num(x: float, spec: str = ".3g") -> str:
    return "–" if x != x else format(x, spec)


def agreement(a: float, b: float) -> str:
    """How one backend's ratio compares with the other's: 'within 10%' or the gap."""
    if a != a or b != b or not b:
        return "–"
    gap = a / b - 1
    return f"within {WITHIN:.0%}" if abs(gap) <= WITHIN else f"{abs(gap):.0%} {'above' if gap > 0 else 'below'}"


def side_by_side(outcome: "Outcome") -> list[str]:
    """The report's section: per claim the bound, the soft ratio, the BMv2 ratio, BMv2 vs
    soft, and each against the bound; empty when the other backend has no results."""
    found = twin_results(outcome)
    if not found:
        return []
    other, folder, theirs = found
    ratios = {}
    for d in outcome.suite.definitions:
        mine = verdicts(outcome.rows, d)
        for i, v in enumerate(mine):
            t = theirs.get(d.name, [])
            ratios[(d.name, v.claim.text)] = {outcome.suite.backend: v, other: t[i] if i < len(t) else None}
    lines = ["## Soft and BMv2 side by side", "",
             f"The same suite on the other backend: {folder}/ (its own ceiling; its report has its runs). "
             f"*BMv2 vs soft*: the BMv2 ratio against the soft one, {WITHIN:.0%} counted as agreeing; "
             "*vs bound* as in the table above, each against its own network's bound (one figure when both "
             "agree; the two scales differ in rate and emulated gradient, and a link's htb bucket is a larger "
             "share of a smaller gradient). `(n flagged)`: runs flagged CPU-bound behind that ratio.", "",
             "| trend | claim | bound (soft / BMv2) | soft | soft vs bound | BMv2 | BMv2 vs bound | BMv2 vs soft |",
             "|---|---|---:|---:|---|---:|---|---|"]
    for (name, text), by in ratios.items():
        soft, bmv2 = by.get(SOFT), by.get("bmv2")
        if all(v is None or v.ours != v.ours for v in (soft, bmv2)):
            continue                      # measured on neither (not in this suite's sweep)

        def cell(v):
            if v is None:
                return "–"
            return _num(v.ours) + (f" ({v.flagged} flagged)" if v.flagged else "")

        bounds = [_num(v.bound) for v in (soft, bmv2) if v is not None]
        bound = bounds[0] if len(set(bounds)) == 1 else " / ".join(bounds)
        lines.append(f"| {name} | {text} | {bound} | {cell(soft)} | {soft.against_bound if soft else '–'} | "
                     f"{cell(bmv2)} | {bmv2.against_bound if bmv2 else '–'} | "
                     f"{agreement(bmv2.ours, soft.ours) if soft and bmv2 else '–'} |")
    return lines + [""]
