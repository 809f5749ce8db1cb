"""Each scheme's allreduce on the hosts: one module per row of ground/schemes.py, found by name.

Why a package: a scheme's runner used to be a function in hosts/communicator.py plus an
`@register` line; now `hosts/schemes/NAME.py` is the whole of it, loaded by the row's name
(a row without a module fails here, naming it). A module provides

    allreduce(comm, array) -> (sum, stats)    # comm: agglab.hosts.communicator.Communicator
    SERVICE_TRANSPORT = True                  # optional: it sends to the service address
                                              # (comm.transport, opened before the first call)
    prepare(comm, array)                      # optional: what it sets up before its first call
    CALLS_READY = True                        # optional: its allreduce calls comm.ready() once
                                              # the call's own state is built, before its first
                                              # packet (else the communicator calls it first)

and the registries below are built from them, never edited by hand.
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
RUNNERS: dict[str, Callable] = {name: m.allreduce for name, m in MODULES.items()}
SERVICE_TRANSPORT: frozenset[str] = frozenset(n for n, m in MODULES.items() if getattr(m, "SERVICE_TRANSPORT", False))
PREPARE: dict[str, Callable] = {n: m.prepare for n, m in MODULES.items() if hasattr(m, "prepare")}
CALLS_READY: frozenset[str] = frozenset(n for n, m in MODULES.items() if getattr(m, "CALLS_READY", False))
