"""Load conformance vectors (p4src/vectors/*.yaml) into plain data both targets can run.

Why YAML with fields rather than pcaps: a reader must see *why* an output is
right (values summed, exponent maxed, addresses rewritten), and a reviewer must
be able to add a case without tools.  See frames.py for the frame spec and
README-style comments at the top of each vector file.

Vector file keys:
    description: text
    defaults:  frame spec merged under every frame (inputs and expected)
    commands:  CLI lines, or {cmd: line, output: regex the answer must match}
    packets:   [{port, frame: spec, expect: [{port, frame: spec}, ...] | []}]
    registers: {"name[i]": v, "name[a:b]": [v, ...]}   after all packets
    counters:  {"agg_stats[i]": packets, "agg_rejects[i]": packets}
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from agglab.ground import wire
from agglab.testkit.frames import build
from agglab.ground.paths import P4_INCLUDE, VECTORS as VECTOR_ROOT

# The program variant's own vectors: register indices are r * K, frame sizes 4 * K,
# so each K has its set (vectors/ for AGG_K, vectors/k<K>/ for the wide variant).
VECTOR_DIR = VECTOR_ROOT / f"k{wire.K}" if wire.WIDE else VECTOR_ROOT
_REGISTER = re.compile(r"^\s*register<bit<(\d+)>>\s*\([^)]*\)\s*(\w+)\s*;", re.M)


def register_widths(include: Path = P4_INCLUDE) -> dict[str, int]:
    """name -> bit width of every `register<bit<W>>(size) name;` of the P4 program: a vector's
    register values are read at the width the program declares (no list to keep by hand
    when a scheme adds registers)."""
    return {name: int(bits) for f in sorted(include.glob("*.p4")) for bits, name in _REGISTER.findall(f.read_text())}


REGISTER_WIDTHS = register_widths()
_COUNTER = re.compile(r"^\s*counter\s*\([^)]*\)\s*(\w+)\s*;", re.M)


def counter_names(include: Path = P4_INCLUDE) -> tuple[str, ...]:
    """Every `counter(size, type) name;` of the P4 program (what a differential run compares)."""
    return tuple(name for f in sorted(include.glob("*.p4")) for name in _COUNTER.findall(f.read_text()))
_INDEX = re.compile(r"^(\w+)\[(\d+)(?::(\d+))?\]$")


@dataclass
class Step:
    port: int
    frame: bytes
    expect: list[tuple[int, bytes]]


@dataclass
class Vector:
    name: str
    description: str
    commands: list[tuple[str, str | None]]
    steps: list[Step]
    registers: dict[tuple[str, int], int] = field(default_factory=dict)
    counters: dict[tuple[str, int], int] = field(default_factory=dict)

    @property
    def ports(self) -> set[int]:
        return {s.port for s in self.steps} | {p for s in self.steps for p, _ in s.expect}


def merge(base: dict, over: dict) -> dict:
    """Deep merge: dicts merge key by key, anything else in `over` wins."""
    out = dict(base)
    for key, value in over.items():
        out[key] = merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) \
            else value
    return out


def _index_items(raw: dict, widths: dict[str, int] | None) -> dict[tuple[str, int], int]:
    out = {}
    for key, value in (raw or {}).items():
        m = _INDEX.match(str(key).replace(" ", ""))
        if not m:
            raise ValueError(f"bad state key {key!r}: use name[i] or name[a:b]")
        name, start = m.group(1), int(m.group(2))
        stop = int(m.group(3)) if m.group(3) else None
        values = value if stop is not None else [value]
        if stop is not None and len(values) != stop - start:
            raise ValueError(f"{key}: {len(values)} values for {stop - start} indices")
        mask = (1 << widths[name]) - 1 if widths and name in widths else None
        for i, v in enumerate(values):
            out[(name, start + i)] = v & mask if mask else v
    return out


def load(path: Path) -> Vector:
    doc = yaml.safe_load(path.read_text())
    defaults = doc.get("defaults", {})
    commands = []
    for item in doc.get("commands", []):
        if isinstance(item, dict):
            commands.append((item["cmd"], item.get("output")))
        else:
            commands.append((str(item), None))
    steps = []
    for p in doc.get("packets", []):
        expect = [(e["port"], build(merge(defaults, e["frame"]))) for e in (p.get("expect") or [])]
        steps.append(Step(p["port"], build(merge(defaults, p["frame"])), expect))
    return Vector(path.stem, doc.get("description", ""), commands, steps,
                  _index_items(doc.get("registers"), REGISTER_WIDTHS),
                  _index_items(doc.get("counters"), None))


def all_vectors() -> list[Vector]:
    return [load(p) for p in sorted(VECTOR_DIR.glob("*.yaml"))]
