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

and the registries below are built from them. Job modules are imported when a job is made
(they import the tree job, which imports the reroute, which imports these registries).
"""

from __future__ import annotations

import importlib
import pkgutil
from types import ModuleType
from typing import Callable

from agglab.ground.schemes import NAMES


def discover() -> tuple[str, ...]:
    """The scheme modules of this package (private helpers aside), for the check against the rows."""
    return tuple(sorted(m.name for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_")))


MODULES: dict[str, ModuleType] = {name: importlib.import_module(f"{__name__}.{name}") for name in NAMES}
INSTALLERS: dict[str, Callable] = {name: m.install for name, m in MODULES.items()}
CARRIES: dict[str, Callable] = {name: m.carry for name, m in MODULES.items() if hasattr(m, "carry")}
WIRE_MODELS: dict[str, str] = {name: m.WIRE_MODEL for name, m in MODULES.items() if hasattr(m, "WIRE_MODEL")}
