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

p4src/agglab.p4 is written once for every scheme: the per-scheme lines it needs (each
control's #include, its instance in AgglabIngress, its branch on its flag) are generated from
the rows into p4src/include/schemes.p4 (`render_p4`), which agglab.p4 includes and expands
(AGGLAB_SCHEME_INSTANCES, AGGLAB_OWN_TABLE_BRANCHES, AGGLAB_ROLE_BRANCHES). That file is
built, not committed: every p4c build writes it first (emulation/p4build.py, `make p4`,
`make p4gen`), so a scheme added is its own files plus its row, and no shared P4 file is
edited. The branches come in the two shapes a scheme has: a control with a table of its own
(shares_pool) runs before agg_job's lookup and what it does not keep is forwarded; a flagged
one taking agg_job's role runs between that lookup and AggOut, before the dense default (the
row with no flag), which agglab.p4 applies itself because the sparse scheme hooks into it (its
re-arm after a dense round). `p4_gaps` checks agglab.p4 uses the generated lines.
"""

from __future__ import annotations

import importlib
import os
import pkgutil
import re
from pathlib import Path
from types import ModuleType

from agglab.ground.paths import P4_INCLUDE, P4SRC
from agglab.ground.schemes import P4_SCHEMES, SCHEMES


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


def _instance(name: str) -> str:
    """The instance of a scheme's control in AgglabIngress: its include file's stem (atp.p4: atp)."""
    return MODULES[name].P4[0].removesuffix(".p4")


def _macro(name: str, lines: list[str]) -> str:
    return f"#define {name} \\\n" + " \\\n".join(f"    {line}" for line in lines) + "\n"


def render_p4() -> str:
    """p4src/include/schemes.p4 for the rows: every P4 scheme's include, its instance, and the
    branches of the flagged ones, each in the rows' order (the first flag a packet carries wins)."""
    includes = "".join(f'#include "{MODULES[name].P4[0]}"{" " * max(1, 18 - len(MODULES[name].P4[0]))}'
                       f"/* {name}{': ' + SCHEMES[name].flag if SCHEMES[name].flag else ': the dense default'} */\n"
                       for name in MODULES)
    instances = [f"{MODULES[name].P4[1]}() {_instance(name)};" for name in MODULES]
    own, role = [], []
    for name in MODULES:
        flag, who = SCHEMES[name].flag, _instance(name)
        if not flag:
            continue
        if SCHEMES[name].shares_pool:
            own += [f"if (hdr.agg.isValid() && (hdr.agg.flags & {flag}) != 0 && !hdr.data.isValid()) {{",
                    "    mark_to_drop(standard_metadata);",
                    "    agg_stats.count(STAT_REJECT);",
                    "    agg_rejects.count(REJ_MALFORMED);",
                    f"}} else if (hdr.agg.isValid() && (hdr.agg.flags & {flag}) != 0) {{",
                    f"    {who}.apply(hdr, meta, standard_metadata);",
                    "    if (meta.absorbed == 0) {",
                    "        forward.apply(hdr, meta, standard_metadata);",
                    "    } else {",
                    "        mark_to_drop(standard_metadata);",
                    "    }",
                    "} else"]
        else:
            role += [f"if ((hdr.agg.flags & {flag}) != 0) {{",
                     f"    {who}.apply(hdr, meta, standard_metadata);",
                     "} else"]
    return (
        "/* GENERATED by agglab.softswitch.schemes.render_p4 from the P4 rows of ground/schemes.py, before every\n"
        " * p4c build (emulation/p4build.py, make p4, make p4gen). Built, not committed: do not edit. */\n"
        "#ifndef AGGLAB_SCHEMES_P4\n#define AGGLAB_SCHEMES_P4\n\n"
        + includes
        + "\n/* Each P4 scheme's control, instanced in AgglabIngress. */\n"
        + _macro("AGGLAB_SCHEME_INSTANCES", instances)
        + "\n/* Before agg_job's lookup, per scheme with a table of its own: a header the parser took for\n"
        " * an ACK (no values to add) is malformed; the rest goes to its control, and what no aggregator\n"
        " * keeps (meta.absorbed == 0) is forwarded. Ends in `else`, for the next branch. */\n"
        + _macro("AGGLAB_OWN_TABLE_BRANCHES", own or ["/* none */"])
        + "\n/* After agg_job's lookup, per flagged scheme that takes agg_job's role. Ends in `else`, for\n"
        " * the dense default. */\n"
        + _macro("AGGLAB_ROLE_BRANCHES", role or ["/* none */"])
        + "\n#endif\n")


def write_p4(include: Path = P4_INCLUDE) -> Path:
    """Write `render_p4()` into `include`/schemes.p4 if it differs (atomically: builds run side
    by side); the path."""
    target, text = include / "schemes.p4", render_p4()
    if not target.is_file() or target.read_text() != text:
        tmp = target.with_name(f".schemes.p4.{os.getpid()}")
        tmp.write_text(text)
        os.replace(tmp, target)
    return target


def p4_gaps(program: Path = P4SRC / "agglab.p4") -> list[str]:
    """What `program` lacks for the P4 schemes, one line each (empty: nothing): each scheme's
    control (its module's P4) defined in its include file and its flag defined; the program
    including the generated schemes.p4 and expanding its lines in AgglabIngress, and applying
    the dense default (the row with no flag) itself."""
    text = program.read_text()
    ingress = text[text.index("control AgglabIngress"):text.index("control AgglabEgress")]
    gaps = []
    for name, module in MODULES.items():
        include, control = module.P4
        source = program.parent / "include" / include
        if not source.is_file() or not re.search(rf"^control\s+{control}\s*\(", source.read_text(), re.M):
            gaps.append(f"{name}: no control {control} in p4src/include/{include}")
        flag = SCHEMES[name].flag
        defined = "".join(f.read_text() for f in (source, program.parent / "include/constants.p4") if f.is_file())
        if flag and not re.search(rf"^#define\s+{flag}\s", defined, re.M):
            gaps.append(f"{name}: {flag} is #defined in neither p4src/include/{include} nor constants.p4")
        if not flag and not re.search(rf"\b{_instance(name)}\.apply\(", ingress):
            gaps.append(f"{name}: AgglabIngress never applies {_instance(name)} (the dense default)")
    if '#include "include/schemes.p4"' not in text:
        gaps.append(f'{program.name} has no #include "include/schemes.p4"')
    for macro in ("AGGLAB_SCHEME_INSTANCES", "AGGLAB_OWN_TABLE_BRANCHES", "AGGLAB_ROLE_BRANCHES"):
        if not re.search(rf"^\s*{macro}\b", ingress, re.M):
            gaps.append(f"AgglabIngress does not expand {macro}")
    return gaps
