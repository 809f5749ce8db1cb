"""Pictures of the trees a trend's runs used, for the report: where the trend is about
trees, the numbers are read against them.

- `failures` plots (rat_failures): the trees before any failure and after each one, from
  the run with the most failures (the same replay of the controller's recompute as `agglab
  draw --fail`, controller/drawing.py);
- `shares` plots (packing): the packed trees with their shares, per slow-link setting.

The trees are recomputed from each run's own spec (its topology file, workers, algorithm),
as the shares plot does: a run's result keeps counts, not the trees.
"""

from __future__ import annotations

from pathlib import Path

from agglab.controller import drawing, topologies
from agglab.controller.topology import workers
from agglab.experiments.definition import Definition
from agglab.ground.runspec import RunSpec


def _specs(rows: list[dict], d: Definition, tree: str) -> list:
    seen, out = set(), []
    for r in rows:
        spec = r.get("spec") if r.get("definition") == d.name else None
        if spec and spec.get("tree") == tree and spec.get("algorithm") not in ("ring", "ps"):
            key = (spec.get("topology"), tuple(spec.get("fail", [])))
            if key not in seen:
                seen.add(key)
                out.append(RunSpec.from_dict(spec))
    return out


def _write(g, epoch, title: str, path: Path) -> Path:
    return drawing.write(drawing.to_dot(g, epoch.treeset, epoch.down, title=title), path)


def failure_drawings(rows: list[dict], d: Definition, out_dir: Path) -> list[Path]:
    """rat_failures: the RAT run with the most named link failures, one picture per epoch."""
    specs = sorted(_specs(rows, d, "rat"), key=lambda s: -len(s.fail_specs))
    if not specs:
        return []
    spec = specs[0]
    g = topologies.for_run(spec)
    links = [f.link for f in sorted(spec.fail_specs, key=lambda f: f.at) if f.link]
    out = []
    for i, ep in enumerate(drawing.after_failures(g, spec.tree, workers(g), links)):
        what = "before any failure" if ep.failed is None else f"after {ep.failed[0]}-{ep.failed[1]} failed"
        out.append(_write(g, ep, f"{d.name}: RAT trees {what} (epoch {ep.treeset.epoch})",
                          out_dir / f"{d.name}-trees-{i}.png"))
    return out


def packing_drawings(rows: list[dict], d: Definition, out_dir: Path) -> list[Path]:
    """packing: the packed trees and their shares on each topology the packing series ran on."""
    out = []
    for i, spec in enumerate(_specs(rows, d, "packing")):
        g = topologies.for_run(spec)
        ep = drawing.after_failures(g, "packing", workers(g))[0]
        out.append(_write(g, ep, f"{d.name}: packed trees on {Path(spec.topology).stem}",
                          out_dir / f"{d.name}-trees-{i}.png"))
    return out


def write_tree_drawings(rows: list[dict], d: Definition, out_dir: Path) -> list[Path]:
    if d.plot == "failures":
        return failure_drawings(rows, d, out_dir)
    if d.plot == "shares":
        return packing_drawings(rows, d, out_dir)
    return []
