"""The network's worker launcher: the fork server that starts every allreduce worker.

Why a module of its own: starting workers is the one thing a network does for the hosts'
programs rather than for the data plane, and what it costs is set here. Forked from one
process that imported them, a worker costs ~0.01 CPU-s to start instead of ~0.12
(tools/scale_costs.py; 128 workers: 15 CPU-s less on two cores), and its PSS is what it adds
to memory. EmulatedNetwork (emulation/network.py) starts one per network and forks each
worker into its host's namespace (`EmulatedNetwork.start_worker`).
"""

from __future__ import annotations

import os

from agglab.ground.forkserver import Launcher
from agglab.ground.paths import IMPORT_ROOT
from agglab.ground.rundir import RunRecord

# What every allreduce worker (hosts/worker.py) starts with imported (see above).
FORKED_WORKERS = ("agglab.hosts.worker",)
WORKER_PRELOAD = ("agglab.hosts.worker", "agglab.hosts.agent", "agglab.hosts.sparse_agent")


def start_worker_launcher(run: RunRecord):
    """The network's worker launcher (ground/forkserver.py), recorded in `run`; it imports
    while the rest of the network is built and forks each worker into its host's namespace."""
    env = dict(os.environ, PYTHONPATH=str(IMPORT_ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    launcher = Launcher(run.path / "worker-launcher.out", WORKER_PRELOAD, cwd=IMPORT_ROOT, env=env, what="worker launcher")
    run.add_pid(launcher.pid, "worker launcher")
    return launcher
