"""Each scheme on the controller: one module per row of ground/schemes.py, found by name.

Why a package: a scheme's job used to be chosen through a hand-kept `INSTALLERS` dict (and
its reroute carry through another, `CARRIES`); now `controller/schemes/NAME.py` is the whole
of it, loaded by the row's name (a row without a module fails here, naming it). A module
provides

    install(seat) -> Job          # the job that installs and runs the scheme, not yet started
                                  # (seat: agglab.controller.installers.JobSeat)
    carry(slot_base) -> Carry     # schemes aggregated on the controller's trees
                                  # (ground/schemes.py ON_TREES): what a reroute keeps
    WIRE_MODEL = "tree"           # the name of its wire-time bound (emulation/wire_model.py
                                  # MODELS); a scheme without one has no bound, said loudly

and the registries below are built from them. Imports only go down: a scheme module imports
the tree job and the reroute's carries; the reroute names no scheme, and a tree job is given
`carry_for` (through the installer's seat, controller/installers.py JobSeat) rather than
importing this registry.
"""

from __future__ import annotations

import importlib
import pkgutil
from types import ModuleType
from typing import Callable

from agglab.controller.reroute.carry import Carry
from agglab.ground.schemes import NAMES


def discover() -> tuple[str, ...]:
    """The scheme modules of this package (private helpers aside), for the check against the rows."""
    return tuple(sorted(m.name for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_")))


MODULES: dict[str, ModuleType] = {name: importlib.import_module(f"{__name__}.{name}") for name in NAMES}
INSTALLERS: dict[str, Callable] = {name: m.install for name, m in MODULES.items()}
CARRIES: dict[str, Callable] = {name: m.carry for name, m in MODULES.items() if hasattr(m, "carry")}
WIRE_MODELS: dict[str, str] = {name: m.WIRE_MODEL for name, m in MODULES.items() if hasattr(m, "WIRE_MODEL")}


def carry_for(algorithm: str, slot_base: int = 0) -> Carry:
    """The reroute carry of scheme `algorithm` (ground/schemes.py) for a job whose slot
    range starts at `slot_base`; ValueError naming the schemes that have one."""
    try:
        return CARRIES[algorithm](slot_base)
    except KeyError:
        raise ValueError(f"no reroute carry for algorithm {algorithm!r}; "
                         f"known: {', '.join(CARRIES)}") from None
