"""The controller's registry of schemes: which job installs and runs each one.

Why a registry: the session used to choose the job class by testing the algorithm's name
(host baseline? BML? else trees); a new scheme then meant editing the session. Here each
scheme of ground/schemes.py names the job that installs it (its module's `install`,
controller/schemes/NAME.py: `INSTALLERS` is built from them), made from one `JobSeat`
(what every job gets: graph, clients, its workers, window, epoch file, id, events, and for
tenants the slot range and which tenant owns the routes). tests/test_schemes.py checks
every scheme has one. BCube's BML is a tree algorithm with a job of its own, chosen by
`--tree bml` whatever the scheme.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import networkx as nx

from agglab.controller.bml_job import BmlJob
from agglab.controller.events import EventLog
from agglab.controller.job_protocol import Job
from agglab.controller.reroute.carry import Carry
from agglab.controller.schemes import INSTALLERS, carry_for
from agglab.controller.switch_client import SwitchClient
from agglab.ground.runspec import BCUBE_TREE, RunSpec


@dataclass
class JobSeat:
    """What the session gives one job (one tenant of `--jobs J`)."""
    spec: RunSpec
    graph: nx.Graph
    clients: dict[str, SwitchClient]
    workers: list[str]
    epoch_file: Path
    events: EventLog
    job: int = 0                      # the job id on the wire
    tenant: int = 0                   # 0 .. jobs-1
    slot_base: int = 0                # the tenant's slot range (partitioned schemes)
    slots: int | None = None
    reply_ports: dict = field(default_factory=dict)   # shared by tenants' TreeJobs
    # scheme -> its reroute carry, for tree jobs (the registry's, handed down: controller/schemes)
    carry_for: Callable[[str, int], Carry] = carry_for


def _bml_job(seat: JobSeat) -> Job:
    return BmlJob(seat.graph, seat.clients, seat.spec.default_window(), seat.epoch_file, job=seat.job,
                  events=seat.events, variant=seat.spec.bml_variant)


def job_for(seat: JobSeat) -> Job:
    """The started job for one seat: BML's on BCube, else the scheme's installer."""
    make = _bml_job if seat.spec.tree == BCUBE_TREE else INSTALLERS[seat.spec.algorithm]
    return make(seat).start()
