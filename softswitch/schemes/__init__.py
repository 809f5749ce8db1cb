"""The P4 schemes' controls on the software switch: one module per scheme, found by name.

Why a package: a scheme's twin used to be named in four places (its module, a `BRANCHES`
line, about five hand-written lines of `Pipeline.__init__`, the batch path's flags). Now
`softswitch/schemes/NAME.py` is the whole of it for every P4 row of ground/schemes.py
(p4=True), loaded by the row's name; the row says which agg_h flag selects it (`flag`) and
whether its control has a table of its own, applied before agg_job's lookup (`shares_pool`).
A module provides

    build(pipeline) -> control     # adds its registers, counters and tables to the pipeline
                                   # (register_arrays, counter_arrays, tables) and returns the
                                   # control whose ingress(port, frame[, role]) the flag selects

    P4 = ("atp.p4", "Atp")         # the P4 control it mirrors: p4src/include/FILE, control NAME

and is built in the rows' order (the dense default first: the others may hook into it, as
the sparse scheme re-arms its slots after a dense round).

p4src/agglab.p4 includes each P4 control, instances it in AgglabIngress and branches on its
flag; `p4_gaps` checks that against the rows (tests/test_schemes.py) rather than generating
those lines as values.p4 is generated: the branches differ in shape (a control with its own
table runs before agg_job and forwards what it leaves; one taking agg_job's role runs between
that lookup and AggOut; the dense one re-arms the sparse state), so a generator would be a
template language for a dozen lines of P4 that read better as P4.
"""

from __future__ import annotations

import importlib
import pkgutil
import re
from pathlib import Path
from types import ModuleType

from ground.paths import P4SRC
from ground.schemes import P4_SCHEMES, SCHEMES


def discover() -> tuple[str, ...]:
    """The scheme modules of this package (private ones aside), for the check against the rows."""
    return tuple(sorted(m.name for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_")))


def load() -> dict[str, ModuleType]:
    """Every P4 scheme's module, in the rows' order; a row without one fails here, by name."""
    return {name: importlib.import_module(f"{__name__}.{name}") for name in P4_SCHEMES}


MODULES = load()

# scheme -> (the agg_h flag that selects its control, whether the control takes agg_job's
# role: False for a scheme with a table of its own, branched to before that lookup)
BRANCHES: dict[str, tuple[int, bool]] = {name: (SCHEMES[name].flag_bits, not SCHEMES[name].shares_pool)
                                         for name in MODULES}


def p4_gaps(program: Path = P4SRC / "agglab.p4") -> list[str]:
    """What `program` lacks for the P4 schemes, one line each (empty: nothing): each scheme's
    control (its module's P4) defined in its include file, that file included, the control
    instanced and applied in AgglabIngress, and a branch on the row's flag define."""
    text = program.read_text()
    ingress = text[text.index("control AgglabIngress"):text.index("control AgglabEgress")]
    gaps = []
    for name, module in MODULES.items():
        include, control = module.P4
        source = program.parent / "include" / include
        if not source.is_file() or not re.search(rf"^control\s+{control}\s*\(", source.read_text(), re.M):
            gaps.append(f"{name}: no control {control} in p4src/include/{include}")
        if f'#include "include/{include}"' not in text:
            gaps.append(f'{name}: {program.name} has no #include "include/{include}"')
        instance = re.search(rf"^\s*{control}\(\)\s+(\w+)\s*;", ingress, re.M)
        if instance is None:
            gaps.append(f"{name}: AgglabIngress has no instance of {control}")
        elif not re.search(rf"\b{instance.group(1)}\.apply\(", ingress):
            gaps.append(f"{name}: AgglabIngress never applies {instance.group(1)}")
        flag = SCHEMES[name].flag
        if flag and not re.search(rf"\bif\s*\([^{{]*\b{flag}\b", ingress):
            gaps.append(f"{name}: AgglabIngress branches on no {flag}")
    return gaps
