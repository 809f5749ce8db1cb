"""One bench figure: the record every section returns and the line `make bench` prints for it.

Why its own module: every section builds its figures with `figure` (and says it cannot run with
`SectionSkipped`), and the sections' modules must not import the CLI that runs them, nor the
package, whose `measure` imports them. The analytic wire time the wire and sparse sections
judge their runs by is emulation/fidelity.py's `dense_link_seconds`, the one the calibration
uses too.
"""

from __future__ import annotations

LINK_BOUND = 1.10          # a run within 10% of its analytic wire time is link-bound
NO_BMV2 = "simple_switch or p4c not found (scripts/provision-vm.sh builds them)"     # the bmv2 sections' skip


class SectionSkipped(Exception):
    """A section cannot run on this machine (a tool it measures is absent): a skip, not a
    failure. Why a type of its own: a section that broke must not pass for one that was skipped."""


def figure(name: str, value: float, unit: str, *, target: str | None = None, met: bool | None = None,
           link_mbps: float | None = None, scale: str = "", link_bound: bool | None = None,
           **extra) -> dict:
    """One measured figure with everything needed to judge it."""
    return {"name": name, "value": round(value, 4) if isinstance(value, float) else value, "unit": unit,
            "target": target, "met": met, "link_mbps": link_mbps, "scale": scale,
            "link_bound": link_bound, **extra}


def show(f: dict, previous: dict | None = None) -> str:
    """A figure's printed line: value, target, link rate, scale, boundness; with `previous`
    (the same figure of an earlier run, `--compare`) its change."""
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
