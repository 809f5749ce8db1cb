"""`make bench`: every speed figure the project has a target for, beside that target, printed and saved as JSON.

Figures (each says its link rate, its scale and whether the run was link-bound, because
an emulation is only faithful while the links, not the CPU, are the bottleneck):

  pipeline   aggregation pipeline in-process, packets/s (dense and sparse)
  daemon     software-switch daemon on veths, 8-way aggregation, frames/s in   (>= 150,000)
  wire       8 workers x 1M int32 on one switch at 5/10/20/40 Mb/s links: seconds
             against the analytic wire time                                      (<= 1.1x at 20)
  wide       the wire figures in the wide program variant (AGGLAB_K=256, 1082-byte
             frames) at 20/40/80 Mb/s                                         (informational)
  reroute    k=4 fat-tree, a tree link fails mid-run: link down to new trees
             installed (detect + recompute + install), spt/rat/packing, dense
             and sparse                                                          (median < 50 ms)
  switchfail k=4 fat-tree, an aggregating tree switch killed (kill -9) mid-run: exit
             seen (detect), recompute, install; dense and sparse, one network,
             the switch restarted between kills                               (informational)
  policer    a host in no job floods one switch with 100,000 unpaced frames while a job
             of 4 workers at 20 Mb/s runs: the job's rate under the flood over its rate
             alone, in one run, policer on and off                           (on: >= 0.9)
  chaos      k=4 fat-tree, 2 jobs x 4 workers, --chaos over 20 seeds: outcomes (exact /
             cleanly partitioned / other), faults struck and what they cost, leftovers
                                                                   (every seed exact or partitioned, 0 left)
  build      k=8 fat-tree (80 switches, 16 workers) built and programmed         (< 15 s)
  sparse     8 workers x 1M int32 at 5 Mb/s, overlapping blocks: dense time over
             sparse time at density 0.1 and 0.01                                 (>= 9x, >= 50x)
  trees      tree computation on fat-trees (informational)
  bmv2       8-way aggregation frames/s per BMv2 switch, reference and performance
             build (-O3, no logging macros, no elogger), beside the software twin's
             (same lab, senders, packets, program); ratio and link-rate ceiling
             (skipped without BMv2/p4c; a build not installed says how to build it)
  bmv2-reroute  k=4 fat-tree of BMv2 switches, a rat tree link fails mid-run, dense and
             sparse, 3 runs each (--bmv2-reroute-runs): phases, exactness  (install < 250 ms)
  limit      CPU µs per frame through one veth + htb chain: the kernel (a Linux bridge),
             the software switch and an agent, at a high rate (batches full) and a low
             rate (a frame per wake-up), each as a ratio to the kernel's  (informational)

    sudo .venv/bin/python -m agglab.bench                      # everything, results/bench/<time>.json
    sudo .venv/bin/python -m agglab.bench --only daemon,build --compare results/bench/PREV.json

Figures that need root (everything but `pipeline` and `trees`) are skipped without it.
Timings depend on the machine's load and its CPU speed of the moment; the JSON records the load
average, the CPU count and, per section, a fixed loop's CPU time (`cpu_reference_s`).

Why a package: the sections are measured by one module per family, each importing what its
runs need only when it runs (a network section pulls in the emulator, `bmv2` BMv2's Thrift
client), and the table below is the one place a section is named, in the order they run:

  figures.py    what a figure records, and its printed line
  cli.py        options, the run over the sections, the JSON (`python -m agglab.bench`)
  twin.py       pipeline, daemon: the software twin's own speed, no network
  allreduce.py  wire, wide, sparse: allreduce time against the links' wire time
  recovery.py   reroute, switchfail, bmv2-reroute: a failure to new trees installed
  faults.py     policer, chaos: hostile traffic and seeded faults
  scale.py      build, trees: the control plane at scale
  bmv2.py       bmv2: BMv2 builds beside the twin (also `python -m agglab.bench.bmv2`)
  limit.py      limit: the switch's and the agent's CPU per frame beside the kernel's
  limit_chain.py  the namespaces, shaped veths and NAPI threads the limit section runs on
  sparse_sweep.py  dense vs sparse over densities (`python -m agglab.bench.sparse_sweep`; not a section)
"""

from __future__ import annotations

import argparse
import importlib

# what a section raises to be skipped, and the bmv2 sections' reason, live in figures.py, which
# the sections import: no section imports this package, which imports them (measure)
from agglab.bench.figures import NO_BMV2, SectionSkipped

# section -> (module of this package that measures it, whether it needs root); run in this order.
# The module's function is `bench_<section>` ("-" as "_"): it takes the parsed options and
# returns its figures (figures.figure), raises SectionSkipped when it cannot run here (listed under
# `skipped` with the reason), or raises anything else when it broke (listed under `failed`).
TABLE = {
    "pipeline": ("twin", False),
    "daemon": ("twin", True),
    "wire": ("allreduce", True),
    "wide": ("allreduce", True),
    "reroute": ("recovery", True),
    "switchfail": ("recovery", True),
    "policer": ("faults", True),
    "chaos": ("faults", True),
    "build": ("scale", True),
    "sparse": ("allreduce", True),
    "trees": ("scale", False),
    "bmv2": ("bmv2", True),
    "bmv2-reroute": ("recovery", True),
    "limit": ("limit", True),
}
SECTIONS = tuple(TABLE)
ROOT_SECTIONS = frozenset(name for name, (_, root) in TABLE.items() if root)


def measure(section: str, a: argparse.Namespace) -> list[dict]:
    """Run one section: its module imported now, so a run imports only what its sections need."""
    module = importlib.import_module(f"{__name__}.{TABLE[section][0]}")
    return getattr(module, "bench_" + section.replace("-", "_"))(a)
