"""The `build` and `trees` sections: the control plane at scale.

Why together: both time what happens before a byte of gradient moves on a large fat-tree:
the k=8 network built and programmed step by step, and the tree algorithms' computation
(controller/trees/bench.py, in a child process).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

from agglab.bench.figures import figure
from agglab.ground import lifeline
from agglab.ground.runspec import RunSpec
from agglab.ground.paths import IMPORT_ROOT


def bench_build(_a) -> list[dict]:
    """The k=8 fat-tree built and programmed, with its steps: the network's (node shells,
    links, switch processes, host set-up, switches answering) and the controller's
    (standby trees' process, forwarding, drop simulators, the job's trees, link and switch
    watchers); then one allreduce and the teardown."""
    from agglab.emulation.session import Session  # lazy: loads numpy, networkx, PyYAML, pyroute2, only bench_build() needs it

    session = Session(RunSpec(topology="fattree", k=8, workers=16, elements=10_000))
    t0 = time.monotonic()
    session.start()
    built = time.monotonic() - t0
    try:
        r = session.allreduce()
    finally:
        t1 = time.monotonic()
        session.stop()
        teardown = time.monotonic() - t1
    network, controller = session.net.phases, session.phases
    return [figure("k=8 fat-tree built and programmed", built, "s", target="< 15 s", met=built < 15,
                   scale="80 switches, 16 workers", link_bound=None,
                   detail=f"network {sum(network.values()):.1f} s ({network.text()}); controller "
                          f"{sum(controller.values()):.1f} s ({controller.text()}); teardown {teardown:.1f} s, "
                          f"allreduce {r['seconds']} s",
                   network_phases=dict(network), controller_phases=dict(controller),
                   teardown_s=round(teardown, 2), allreduce_s=r["seconds"], exact=r["exact"])]


def bench_trees(_a) -> list[dict]:
    """Tree computation time per topology and tree algorithm (controller/trees/bench.py), each a
    figure in the JSON (informational: no target)."""
    res = subprocess.run([sys.executable, "-m", "agglab.controller.trees.bench", "--json"], cwd=IMPORT_ROOT, check=True,
                         capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=str(IMPORT_ROOT)),
                         preexec_fn=lifeline.preexec(bound_to_thread=True))
    rows = [json.loads(line) for line in res.stdout.splitlines() if line.strip()]
    return [figure(f"trees {r['tree']} on {r['topology']}, {r['workers']} workers", r["ms"], "ms",
                   scale=f"{r['trees']} tree(s), median of the repeats", trees=r["trees"]) for r in rows]
