"""Where a paper's figure appears: a claim's bound swept over the one knob its paper's setting
differs in, and the knob value at which the bound reaches the paper's figure.

Why: a claim that falls short of its paper on this network is only half an answer; the reader
asks how far the network would have to move to see the paper's figure (RAT's 25x needs a far
more oversubscribed core than a 1:4 leaf-spine; ATP's gain needs more jobs sharing a pool).
The emulated points stay where the emulator is faithful (the trend's own sweep); beyond them
the curve is the wire model's alone (experiments/bounds.py), which the emulated points are
checked against wherever both exist.

A claim names its knobs in its trend file:

    where:
      - {knob: oversubscription, values: [1, 2, 4, 8, 16, 32, 64]}
      - {knob: racks, values: [4, 8, 16], with: {ps_layout: central}}

`knob` is a run, network or sweep key of the definition; each value replaces it in every point
(and in the claim's selectors), and the claim's bound is computed as the report computes it.
`with` holds other keys at values the trend does not run (the paper's layout, say).
PACE's claims (`bound: pace_model`) are swept with the pure iteration model at each point's
modelled cost (experiments/bounds.py pace_pure_bound): no run measured the emulator's there.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agglab.emulation.fidelity import DEFAULT_CEILING_MBPS
from agglab.emulation.pace_run import PaceOptions
from agglab.experiments.analysis import planned_bound
from agglab.experiments.definition import NETWORK_KEYS, PACE_KEYS, RUN_FIELDS, ConfigError, Definition
from agglab.ground.runspec import RunSpec


@dataclass
class Curve:
    """One claim's bound against one knob."""
    trend: str
    claim: str
    paper: float
    expect: str
    knob: str
    today: Any                         # the knob's value in the trend's claim (None: several or unset)
    points: list[tuple[Any, float, float]]   # (knob value, bound (nan: none), the paper's figure there)
    problem: str = ""                  # why some point has no bound
    why: str = ""                      # the trend file's word on this knob (what else the paper's setting has)
    fixed: dict = dataclasses.field(default_factory=dict)   # settings held at another value than the trend's (`with`)

    @property
    def held(self) -> str:
        """The `fixed` settings in words: "ps_layout=central" ("" for none)."""
        return ", ".join(f"{k}={v}" for k, v in self.fixed.items())

    @property
    def name(self) -> str:
        """The knob, with what it is swept under: "racks (with ps_layout=central)"."""
        return f"{self.knob} (with {self.held})" if self.fixed else self.knob

    @property
    def reached_at(self) -> Any:
        """The first knob value (in the order given) whose bound reaches the paper's figure
        (at_most claims: falls to it); None if none does."""
        for value, bound, paper in self.points:
            if bound == bound and (bound <= paper if self.expect == "at_most" else bound >= paper):
                return value
        return None

    def verdict(self) -> str:
        at = self.reached_at
        if at is not None:
            return f"reached at {self.knob} = {at}" + (f" (with {self.held})" if self.fixed else "")
        known = [(v, b) for v, b, _ in self.points if b == b and not math.isinf(b)]
        if not known:
            return f"no bound ({self.problem or 'the wire model has none'})"
        v, b = max(known, key=lambda vb: vb[1])
        held = f", with {self.held}" if self.fixed else ""
        said = f"not reached up to {self.knob} = {self.points[-1][0]} (largest bound {b:.3g}, at {v}{held})"
        return f"{said}: {self.why}" if self.why else said


def _with_knob(d: Definition, raw: dict, knob: str, value: Any) -> tuple[Definition, dict]:
    """The definition and claim with `knob` set to `value` everywhere: the sweep keeps that one
    value, the run (or network) carries it, every series that set it is overridden, and the
    claim's selectors name it."""
    sweep = {k: ([value] if k == knob else v) for k, v in d.sweep.items()}
    run, network = dict(d.run), dict(d.network)
    if knob not in d.sweep:
        (network if knob in NETWORK_KEYS else run)[knob] = value
    series = {name: ({**fields, knob: value} if knob in fields else fields) for name, fields in d.series.items()}
    claim = {**raw, "ratio": [({**sel, knob: value} if knob in sel or knob in d.sweep else sel)
                              for sel in raw["ratio"]], "for_each": [k for k in _each(raw) if k != knob]}
    changed = dataclasses.replace(d, sweep=sweep, run=run, network=network, series=series,
                                  claims_raw=[claim], built=[])
    return changed, claim


def _each(raw: dict) -> list[str]:
    each = raw.get("for_each") or []
    return [each] if isinstance(each, str) else list(each)


def curve(d: Definition, index: int, knob: str, values: list, topo_dir: Path, why: str = "",
          fixed: dict | None = None) -> list[Curve]:
    """Claim `index` of `d` (one Curve per for_each expansion of the others) against `knob`,
    with the `fixed` settings held at their given values (then there is no "today": the
    trend never ran that setting)."""
    raw = d.claims_raw[index]
    fixed = dict(fixed or {})
    for key, value in fixed.items():
        d, raw = _with_knob(d, raw, key, value)
    default = (getattr(RunSpec(), knob, None) if knob in RUN_FIELDS else
               getattr(PaceOptions(), knob, None) if knob in PACE_KEYS else None)
    in_series = {fields[knob] for fields in d.series.values() if knob in fields}   # one series' own setting
    if len(in_series) == 1:
        default = next(iter(in_series))
    today = None if fixed else next((sel[knob] for sel in raw["ratio"] if knob in sel),
                                    d.run.get(knob, d.network.get(knob, default)))
    out: dict[str, Curve] = {}
    for value in values:
        try:
            changed, _ = _with_knob(d, raw, knob, value)
            changed.points(DEFAULT_CEILING_MBPS, topo_dir)
            claims = changed.claims()
        except ConfigError as exc:
            for c in out.values():
                c.points.append((value, float("nan"), float("nan")))
                c.problem = c.problem or str(exc)
            continue
        for claim, _ in claims:
            bound, no_bound = planned_bound(changed, claim)
            c = out.setdefault(claim.text, Curve(d.name, claim.text, claim.paper, claim.expect, knob, today, [],
                                                 why=" ".join(why.split()), fixed=fixed))
            c.points.append((value, bound, claim.paper))
            if value == today:
                c.paper = claim.paper
            c.problem = c.problem or no_bound
    return list(out.values())


def curves(d: Definition, topo_dir: Path) -> list[Curve]:
    """Every knob of every claim of `d` that names one (`where` in its trend file)."""
    out = []
    for i, raw in enumerate(d.claims_raw):
        for w in raw.get("where") or []:
            out.extend(curve(d, i, w["knob"], list(w["values"]), topo_dir, str(w.get("why", "")), w.get("with")))
    return out
