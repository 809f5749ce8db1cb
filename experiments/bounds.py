"""What this network allows: a claim's analytic bound, beside the paper's figure and ours.

Why: a claim that falls short of a paper's figure is only informative beside what *this*
network can reach. If the measured ratio matches the bound, the emulator agrees with the
theory and the gap to the paper is the setting's (fewer workers, milder rates); if it does
not, the emulator (or the theory) is off, and the report says by how much.

`bound: wire_time` (the default): the ratio of the numerator's and denominator's wire times,
each from its point's own topology, rates and bytes (emulation/wire_model.py: trees, routes,
sparse blocks and failures as the run has them). `bound: training` (jobs that train): the
ratio of the points' training times, each iterations x (compute + a call limited by its
bytes or by its window's round trips, the round trip the point's runs measured;
emulation/training_model.py). `bound: pace_model` (program: pace): the
pure iteration model's FIFO/PACE with the emulator's measured alpha and beta, which every
PACE run records. Ratios need no unit conversion.
"""

from __future__ import annotations

import math
import statistics

from agglab.emulation.pace_run import PaceOptions, model_runs
from agglab.emulation.training_model import training_seconds
from agglab.emulation.wire_model import BoundError, wire_seconds
from agglab.pace.fusion import CostModel
from agglab.pace.schedule import load_profile

MATCH_TOLERANCE = 0.10                       # "matches its bound" within this fraction

__all__ = ["BoundError", "MATCH_TOLERANCE", "compare", "measured_rtt", "pace_model_bound", "pace_pure_bound",
           "training_bound", "wire_time_bound"]


# -- a claim's bound ------------------------------------------------------------------
def wire_time_bound(num: list, den: list) -> float:
    """Numerator's wire time over the denominator's (each a list of RunSpecs of one point:
    planned ones share a time; runs whose failure was picked at run time each have their
    own, and their median is the point's)."""
    if not num or not den:
        raise BoundError("a point of this claim is not in this run's sweep")
    return statistics.median(map(wire_seconds, num)) / statistics.median(map(wire_seconds, den))


def measured_rtt(rows: list[dict]) -> float | None:
    """Seconds: the median of the round trips (`rtt_min_ms`, hosts/checker.py) the ok runs'
    jobs measured; None if none did (then a training bound counts bytes and compute only)."""
    vals = [j["rtt_min_ms"] for r in rows if r.get("ok") for j in r.get("jobs") or []
            if j.get("rtt_min_ms") is not None and j["rtt_min_ms"] > 0]   # else no round trip
    return statistics.median(vals) / 1e3 if vals else None


def training_bound(num: list, num_rows: list[dict], den: list, den_rows: list[dict]) -> float:
    """Numerator's training time over the denominator's (emulation/training_model.py), each
    point's window limited by the round trip its own runs measured (measured_rtt)."""
    if not num or not den:
        raise BoundError("a point of this claim is not in this run's sweep")
    rtt_num, rtt_den = measured_rtt(num_rows), measured_rtt(den_rows)
    return (statistics.median(training_seconds(s, rtt_num) for s in num)
            / statistics.median(training_seconds(s, rtt_den) for s in den))


def pace_model_bound(num_rows: list[dict], den_rows: list[dict]) -> float:
    """The pure iteration model's ratio with the emulator's measured alpha and beta (each
    PACE run records its schedulers' `planned_iteration_ms`, the model with that cost)."""
    def planned(rows):
        vals = [r["pace"]["planned_iteration_ms"][r["pace"]["scheduler"]] for r in rows
                if r.get("ok") and (r.get("pace") or {}).get("planned_iteration_ms")]
        if not vals:
            raise BoundError("no run recorded the model's iteration with the measured cost")
        return statistics.median(vals)
    return planned(num_rows) / planned(den_rows)


def pace_pure_bound(num: list, den: list) -> float:
    """The pure iteration model's ratio at the planned points' own modelled cost (their
    `alpha_us` and real link rate, emulation/pace_run.py's PaceOptions): PACE's bound where no
    run has measured the emulator's cost, i.e. a knob swept beyond the trend's own runs
    (experiments/where.py: the per-call start-up cost, the compute/communication ratio)."""
    def planned(points):
        if not points:
            raise BoundError("a point of this claim is not in this run's sweep")
        times = []
        for p in points:
            opts = PaceOptions(**{k: v for k, v in p.program.items() if k in PaceOptions.__dataclass_fields__})
            cost = CostModel.for_network(p.spec.algorithm, p.spec.workers, opts.link_gbps, opts.alpha_us)
            scheduler = p.program["scheduler"]
            times.append(model_runs(load_profile(str(p.program["model"])), [scheduler], cost, opts)[scheduler]
                         .iteration_ms)
        return statistics.median(times)
    return planned(num) / planned(den)


def compare(ours: float, bound: float) -> str:
    """'matches its bound' within MATCH_TOLERANCE, else how far off and which way."""
    if ours != ours or bound != bound or bound <= 0 or math.isinf(bound):
        return "–"
    q = ours / bound
    if abs(q - 1) <= MATCH_TOLERANCE:
        return "matches its bound"
    return f"{abs(q - 1):.0%} {'below' if q < 1 else 'above'} its bound"
