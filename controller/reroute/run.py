"""A TreeJob's reroute, run ahead of everything else on the machine: the entry point.

Why a step of its own: a reroute is a few tens of milliseconds of Python and switch work on
a machine shared by a score of switch daemons and the workers, so while it runs this
process's threads are real time and the live switches' daemons raised (ground/priority.py,
as root; the ones about to hold to real time), and the garbage collector waits (a full
collection of the controller's heap: tens of ms). Then it takes the bulk path (bulk.py)
where every switch takes pipelined batches, else the step-by-step one (steps.py).
"""

from __future__ import annotations

import gc
import time
from contextlib import ExitStack

from agglab.ground.priority import HOLD_RT, urgent
from agglab.controller.reroute.bulk import BulkReroute
from agglab.controller.reroute.steps import reroute_steps


def run_reroute(job, link: str, t_detect: float, switch: str | None = None) -> dict:
    """Reroute TreeJob `job` around the failed `link` ("a1-c1"), or the dead `switch` (then
    `link` is "switch a1"), detected at `t_detect`; returns the failure record."""
    t0 = time.monotonic()        # the boost below counts as part of the recompute
    collecting = gc.isenabled()
    gc.disable()
    try:
        with urgent(), ExitStack() as switches_urgent:
            def raise_switches(holding=()) -> None:   # once the first batches are on their way;
                pids = {sw: job.clients[sw].pids() for sw in job.live_switches()}   # those about
                switches_urgent.enter_context(urgent([p for sw in holding for p in pids[sw]], own=False,
                                                     pids_rt=HOLD_RT))                # to hold: real time
                switches_urgent.enter_context(urgent([p for sw in pids if sw not in holding for p in pids[sw]],
                                                     own=False))
            if job.bulk:
                return BulkReroute(job, link, t_detect, switch, t0, raise_switches).run()
            raise_switches()
            return reroute_steps(job, link, t_detect, switch, t0)
    finally:
        if collecting:
            gc.enable()
