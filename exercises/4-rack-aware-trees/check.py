"""Exercise 4's checks: the student's rack-aware trees, graded against a rerun of the project's.

The student's RAT runs on an oversubscribed leaf-spine (and the lab's fat-tree), intact and
with links failed: its trees must be valid, rack-aware (one uplink edge per ToR) whenever
rack-aware trees exist, and complete an allreduce no later than the reference's (the
project's own controller/trees/rat.py, loaded under another name) in the link-load model.
"""

from __future__ import annotations

import importlib.util

from agglab.exercise_kit import result, short_error
from agglab.ground.paths import REPO
from agglab.ground.runspec import RunSpec

TITLE = "Aggregation trees: rack-aware trees on an oversubscribed leaf-spine"
MINUTES = 60
FILES = ("controller/trees/rat.py",)
REGIONS = ("rack-aware",)

TENSOR_MB = 100            # the allreduce whose completion time the tree exercise compares


def tree_scenarios():
    """(label, graph) pairs: the oversubscribed leaf-spine intact and with uplinks down, and the
    lab's fat-tree with a ToR uplink down (there a ToR is the *second* name of its edges)."""
    from agglab.controller import topologies  # lazy: loads networkx, PyYAML, only tree_scenarios() needs it (`agglab exercise list` loads check.py for its title)

    for label, down in [("intact", []), ("l1-s1 down", [("l1", "s1")]),
                        ("l1-s1 and l3-s2 down", [("l1", "s1"), ("l3", "s2")])]:
        g = topologies.leaf_spine(racks=4, hosts_per_rack=4, spines=3, host_bw=100, uplink_bw=40)
        for u, v in down:
            g.edges[u, v]["up"] = False
        yield (f"leaf-spine 4 racks x 4 hosts, 3 spines, hosts 100 Mb/s, uplinks 40 Mb/s "
               f"({g.graph['oversubscription']:.2f}:1), {label}"), g
    g = topologies.for_run(RunSpec(workers=8, topology="fattree", tree="rat", bw=100))
    g.edges["e1", "a1"]["up"] = False
    yield "the lab's fat-tree k=4, 8 workers, links 100 Mb/s, e1-a1 down", g


def checks(work) -> list[dict]:
    """The student's RAT in every scenario: valid trees, rack-aware ones, and a completion time
    no worse than the reference's."""
    from agglab.controller.topology import workers  # lazy: loads networkx, only checks() needs it (`agglab exercise list` loads check.py for its title)
    from agglab.controller.trees import base, compute  # lazy: loads networkx, only checks() needs it (`agglab exercise list` loads check.py for its title)

    reference = _reference_rat()
    out = []
    for label, g in tree_scenarios():
        name = f"rack-aware trees, {label}"
        try:
            ts = compute("rat", g)
            for t in ts.trees:
                base.check_tree(g, t, workers(g))
        except Exception as exc:
            out.append(result(name, False, short_error(exc)))
            continue
        ref = reference.compute(g, workers(g))
        relays = [(t.root, tor) for t in ts.trees for tor in _relaying_tors(g, t)]
        ref_relays = [(t.root, tor) for t in ref.trees for tor in _relaying_tors(g, t)]
        secs, ref_secs = TENSOR_MB * 8 * link_cost(g, ts), TENSOR_MB * 8 * link_cost(g, ref)
        if relays and not ref_relays:
            out.append(result(name, False, f"tree rooted at {relays[0][0]} makes {relays[0][1]} carry more than "
                                           f"one uplink edge (it relays another rack) although rack-aware "
                                           f"trees exist"))
        elif secs > ref_secs * (1 + 1e-6):
            out.append(result(name, False, f"completion time of a {TENSOR_MB} MB allreduce {secs:.3g} s is above "
                                           f"the reference's {ref_secs:.3g} s (link-load model: the busiest "
                                           f"link's share of the tensor / its rate)"))
        else:
            out.append(result(name, True, f"{len(ts.trees)} tree(s), roots "
                                          f"{', '.join(t.root for t in ts.trees)}; a {TENSOR_MB} MB allreduce "
                                          f"completes in {secs:.3g} s (reference {ref_secs:.3g} s)"))
    return out


def _reference_rat():
    """The project's own rat.py, loaded under another name (the student's is agglab.controller.trees.rat)."""
    spec = importlib.util.spec_from_file_location("agglab_reference_rat", REPO / "controller/trees/rat.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _relaying_tors(g, tree) -> list[str]:
    """ToRs (switches with a worker below them) with more than one switch-switch edge in the tree."""
    tors = {tree.parent[n] for n in tree.parent if g.nodes[n]["kind"] == "host"}
    return sorted(t for t in tors
                  if sum(1 for e in tree.edges if t in e and all(g.nodes[x]["kind"] == "switch" for x in e)) > 1)


def link_cost(g, ts) -> float:
    """Seconds per Mb of tensor on the busiest link: each tree edge carries its weight once
    per direction, so a link's time is (sum of the weights of the trees over it) / capacity."""
    from agglab.controller.trees.base import capacities  # lazy: loads networkx, only link_cost() needs it (`agglab exercise list` loads check.py for its title)

    cap, load = capacities(g), {}
    for t in ts.trees:
        for e in t.edges:
            load[e] = load.get(e, 0.0) + t.weight
    return max(w / cap[e] for e, w in load.items())
