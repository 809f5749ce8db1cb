"""The checks of `agglab exercise check`, run in a fresh interpreter with the student's code.

    python -m agglab.exercise_checks N --overlay DIR --work DIR [--bmv2 auto|yes|no]

Why a separate interpreter: the student's modules are loaded *in place of* the project's
(sys.modules, before anything imports them) from the overlay folder agglab/exercise.py built,
so nothing in the repo is modified and a crash or endless loop in student code cannot take
the CLI down. Prints one JSON list of {name, ok, detail} as its last line.

What runs: the regions are filled in (no TODO left); the conformance vectors of
p4src/vectors that exercise the regions, on the software switch (in process); an
end-to-end allreduce through the software switch with real agents (agglab/testkit/fakenet.py: the
same frames as Mininet, in-process wires); for P4 exercises, the same vectors on BMv2 with
the student's P4 compiled from an overlay p4src (needs simple_switch, p4c and root), then an
allreduce in Mininet through simple_switch running it. The tree and link-failure exercises
are graded against a rerun of the controller's algorithms. A failed check's detail starts
with the first differing packet field or register; the frames in full are in "packets".
"""

from __future__ import annotations

import argparse
import importlib
import importlib.abc
import importlib.util
import json
import os
import shutil
import sys
import traceback
from pathlib import Path

from ground.paths import P4SRC, REPO

VECTORS = {
    1: ("first_contribution", "accumulation", "max_exponent", "completion_multicast",
        "duplicate_before_completion", "duplicate_after_completion", "tree_inner_switch", "sparse_rearm"),
    2: ("version_flip_shadow", "duplicate_after_completion", "completion_multicast"),
    3: ("sparse_first_round", "sparse_completion", "sparse_skip_block", "sparse_new_round",
        "sparse_column_done", "sparse_tree_inner", "sparse_duplicates", "sparse_probe"),
}


def result(name: str, ok: bool, detail: str = "") -> dict:
    return {"name": name, "ok": bool(ok), "detail": detail}


def short_error(exc: BaseException) -> str:
    """The student's exception and where in their file it came from."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if "agglab-exercise-" in f.filename]
    if not frames:
        return f"{type(exc).__name__}: {exc}"
    rel = frames[-1].filename.split("/overlay/", 1)[-1]      # the path in the student's work folder
    return f"{type(exc).__name__}: {exc} (at {rel}:{frames[-1].lineno})"


class OverlayFinder(importlib.abc.MetaPathFinder):
    """Finds the overlay's files first: `hosts.slots` is overlay/hosts/slots.py when it exists."""

    def __init__(self, overlay: Path):
        self.files = {".".join(p.relative_to(overlay).with_suffix("").parts): p for p in overlay.rglob("*.py")}

    def find_spec(self, name, path=None, target=None):
        if name in self.files:
            return importlib.util.spec_from_file_location(name, self.files[name])
        return None


def load_overlay(overlay: Path) -> list[dict]:
    """Put the overlay first and import each of its modules; one that does not import is a failed check."""
    finder = OverlayFinder(overlay)
    sys.meta_path.insert(0, finder)
    out = []
    for name, path in sorted(finder.files.items()):
        try:
            importlib.import_module(name)
        except Exception as exc:
            out.append(result(f"your {path.relative_to(overlay)} imports", False, short_error(exc)))
    return out


def regions_filled(ex, overlay: Path, p4_graded: bool, why: str) -> list[dict]:
    """No TODO left in the student's regions. P4 regions are only graded where BMv2 runs: on a
    machine without it the Python twin is the exercise, and the P4 regions are shown as SKIP."""
    from agglab.exercise import TODO, regions

    out = []
    for rel in ex.files:
        for name, region in regions((overlay / rel).read_text(), rel).items():
            if name not in ex.regions:
                continue
            todo = TODO in region.body
            check = result(f"region {name} in {rel} written", not todo,
                           f"region {name} still holds the skeleton's TODO: {region.hint}" if todo else "")
            if rel.endswith(".p4") and not p4_graded:
                check.update(ok=True, skipped=True, detail=f"P4 not graded here: {why}"
                             + (" (still TODO)" if todo else ""))
            out.append(check)
    return out


def bmv2_plan(ex, mode: str) -> tuple[bool, str]:
    """(run the BMv2 checks?, why not)."""
    if not ex.p4 or mode == "no":
        return False, "--bmv2 no" if ex.p4 else ""
    from agglab.testkit.bmv2_target import find_tools

    if find_tools() is None:
        return False, "BMv2 simple_switch/p4c not found (PATH or /opt/p4/bin)"
    if os.geteuid() != 0:
        return False, "BMv2 checks need root (a network namespace)"
    return True, ""


def conformance(target, names, ordered: bool, label: str) -> list[dict]:
    """Each named vector on `target`; the first differing packet or register on failure."""
    from agglab.testkit.conformance import run_vector
    from agglab.testkit.vectors import VECTOR_DIR, load

    out = []
    for name in names:
        vector = load(VECTOR_DIR / f"{name}.yaml")
        about = " ".join(vector.description.split())
        try:
            run_vector(target, vector, ordered=ordered)
            out.append(result(f"conformance {name} ({label})", True))
        except AssertionError as exc:
            first, _, packets = str(exc).partition("\n  sent:\n")
            check = result(f"conformance {name} ({label})", False,
                           f"{first}\n{wrap('what this vector checks: ' + about)}\n"
                           f"  (the whole vector: p4src/vectors/{name}.yaml)")
            if packets:             # the frames in full: `check --verbose` and the JSON grade show them
                check["packets"] = "  sent:\n" + packets
            out.append(check)
        except Exception as exc:
            out.append(result(f"conformance {name} ({label})", False, short_error(exc)))
    return out


def allreduce_soft(name: str, n: int, arrays, expected, **kw) -> dict:
    """One allreduce by n real agents through the software switch (agglab/testkit/fakenet.py)."""
    import numpy as np

    from agglab.testkit.fakenet import FakeNet

    loss, seed = kw.pop("loss", 0.0), kw.pop("seed", 0)
    try:
        results = FakeNet(n, backend="pipeline", loss=loss, seed=seed).run(arrays, join_timeout=60, give_up=5, **kw)
    except AssertionError as exc:
        return result(name, False, str(exc))
    for rank, r in enumerate(results):
        if isinstance(r, BaseException):
            return result(name, False, f"rank {rank}: {short_error(r)}")
        out, stats = r
        if not np.array_equal(out, expected):
            bad = int(np.flatnonzero(out != expected)[0])
            return result(name, False, f"rank {rank}: element {bad} is {out[bad]}, expected {expected[bad]}")
    s = results[0][1]
    return result(name, True, f"{n} workers x {len(expected)} int32 exact, "
                              f"{s.retransmissions} retransmissions at rank 0")


def dense_allreduce(name: str, n: int = 4, length: int = 4096, **kw) -> dict:
    import numpy as np

    rng = np.random.default_rng(7)
    arrays = [rng.integers(-1000, 1000, length, dtype=np.int32) for _ in range(n)]
    return allreduce_soft(name, n, arrays, np.sum(np.stack(arrays), axis=0, dtype=np.int32), **kw)


def sparse_allreduce(name: str) -> dict:
    from hosts.sparse_workload import expected_sparse_sum, sparse_gradient
    from ground.wire import K

    n, length = 4, 64 * K * 4
    arrays = [sparse_gradient(r, length, "int32", 0.2, "random", K, seed=5) for r in range(n)]
    expected = expected_sparse_sum(n, length, "int32", 0.2, "random", K, seed=5)
    return allreduce_soft(name, n, arrays, expected, sparse=True, window=6)


def two_allreduces(name: str) -> dict:
    """Two allreduces in a row on the same switch state: the versions must alternate across calls.
    The first call gives every slot three rounds (a lead and two blocks: versions v, v+1, v), so
    the second call must start each slot at the other version (v0), not at version 0 again."""
    import numpy as np

    from ground.wire import K
    from agglab.testkit.fakenet import FakeNet

    n, window = 3, 16
    net = FakeNet(n, backend="pipeline")
    for call, length in enumerate((2 * window * K, window * K)):
        arrays = [np.full(length, r + 10 * call, np.int32) for r in range(n)]
        results = net.run(arrays, join_timeout=60, give_up=3, window=window)
        expected = np.sum(np.stack(arrays), axis=0, dtype=np.int32)
        for rank, r in enumerate(results):
            if isinstance(r, BaseException):
                return result(name, False, f"call {call + 1}, rank {rank}: {short_error(r)}")
            if not np.array_equal(r[0], expected):
                return result(name, False, f"call {call + 1}, rank {rank}: got {r[0][0]}, expected "
                                           f"{expected[0]} (a stale result of the previous call?)")
    return result(name, True, "second call got fresh sums")


def bmv2_checks(ex, overlay: Path) -> list[dict]:
    """The exercise's vectors on BMv2, compiled from the repo's p4src with the student's files."""
    import agglab.testkit.bmv2_target as bt

    tools = bt.find_tools()
    src = overlay / "bmv2-p4src"
    shutil.copytree(P4SRC, src)
    for rel in ex.files:
        if rel.endswith(".p4"):
            shutil.copy(overlay / rel, src / Path(rel).relative_to("p4src"))
    bt.P4SRC = src                     # compile_p4 reads it at call time: the include override
    work = overlay / "bmv2"
    work.mkdir()
    from agglab.testkit.vectors import VECTOR_DIR, load

    ports = set()
    for name in VECTORS[ex.number]:
        ports |= load(VECTOR_DIR / f"{name}.yaml").ports
    target = bt.Bmv2Target(tools, work, max(ports) + 1)
    try:
        target.start()
    except RuntimeError as exc:
        return [result("your P4 compiles (p4c)", False, str(exc)[-2000:])]
    try:
        out = [result("your P4 compiles (p4c)", True)] + conformance(target, VECTORS[ex.number], False, "BMv2")
    finally:
        target.close()
    return out + [bmv2_allreduce(ex.number, target.json)]


BMV2_RUNS = {       # the end-to-end allreduce on BMv2 per P4 exercise (RunSpec fields)
    1: dict(elements=4096),
    2: dict(elements=4096, loss=0.05),
    3: dict(elements=16384, algorithm="omnireduce", density=0.2),
}


def bmv2_allreduce(number: int, json_path: Path) -> dict:
    """One allreduce by 4 workers in Mininet (one switch) through simple_switch running the
    student's compiled P4; the workers are the project's agents (hosts/ in the repo)."""
    kw = BMV2_RUNS[number]
    name = (f"allreduce 4 workers x {kw['elements']} int32{', ' + kw['algorithm'] if 'algorithm' in kw else ''}"
            f"{', loss ' + format(kw['loss'], '.0%') if 'loss' in kw else ''} (BMv2, Mininet)")
    if shutil.which("mnexec") is None:
        return {**result(name, True, "Mininet (mnexec) not found: the allreduce on BMv2 needs it"), "skipped": True}
    import emulation.p4build as p4build
    from emulation.session import run_spec
    from ground.runspec import RunSpec

    p4build.compile_p4 = lambda out_dir=None: json_path      # the student's P4, not p4src's
    try:
        r = run_spec(RunSpec(workers=4, backend="bmv2", topology="single", give_up=30, **kw))
    except Exception as exc:
        return result(name, False, short_error(exc))
    if r.get("errors"):
        return result(name, False, "\n".join(e.splitlines()[0] for e in r["errors"][:4]))
    ok = bool(r["ok"] and r["exact"])
    return result(name, ok, f"{'exact' if r['exact'] else 'NOT EXACT'}: {r['seconds']:.2f} s, "
                            f"{r['retransmissions']} retransmissions (link rate unlimited, one switch)")


ABOUT = {
    "allreduce": "4 agents send every block; each needs the switch to add all 4 contributions, "
                 "multicast the result once complete and answer retransmissions; the conformance "
                 "checks above name the first packet where your switch differs",
    "loss": "at 5% loss per packet and direction every slot needs retransmissions: the host's "
            "timer must resend and re-arm until a result comes, and the switch must tell a "
            "retransmission (bit already set) from a new round of the other version",
    "two calls": "the first call gives every slot 3 rounds (versions v, v+1, v), so the switch "
                 "still holds each slot's last, completed version; the second call must start "
                 "each slot on the other version, or the switch answers it with the old result",
    "sparse": "the agents trust the next block the switch announces in each result; when it is "
              "not the minimum of the children's announcements, they disagree on the next round; "
              "the conformance checks above show the first packet where your switch differs",
}


def explain(check: dict, about: str) -> dict:
    """Add what a failing end-to-end check needs, in words (the conformance details are exact)."""
    if not check["ok"]:
        check["detail"] += "\n" + wrap("what this checks: " + about)
    return check


def wrap(text: str) -> str:
    """An explanation in lines of a terminal's width, indented under its check."""
    import textwrap

    return textwrap.fill(text, width=96, initial_indent="  ", subsequent_indent="    ")


# -- the tree and failure exercises ------------------------------------------------------
TENSOR_MB = 100            # the allreduce whose completion time the tree exercise compares


def tree_scenarios():
    """(label, graph) pairs: the oversubscribed leaf-spine intact and with uplinks down, and the
    lab's fat-tree with a ToR uplink down (there a ToR is the *second* name of its edges)."""
    from controller import topologies
    from ground.runspec import RunSpec

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


def tree_checks() -> list[dict]:
    """The student's RAT on an oversubscribed leaf-spine (and the lab's fat-tree), intact and with
    links failed: valid trees, rack-aware ones (one uplink edge per ToR), and a completion time
    no worse than the reference's."""
    from controller.trees import base, compute

    reference = _reference_rat()
    out = []
    for label, g in tree_scenarios():
        name = f"rack-aware trees, {label}"
        try:
            ts = compute("rat", g)
            for t in ts.trees:
                base.check_tree(g, t, ts_workers(g))
        except Exception as exc:
            out.append(result(name, False, short_error(exc)))
            continue
        ref = reference.compute(g, ts_workers(g))
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


def ts_workers(g):
    from controller.topology import workers

    return workers(g)


def _reference_rat():
    """The project's own rat.py, loaded under another name (the student's is controller.trees.rat)."""
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
    from controller.trees.base import capacities

    cap, load = capacities(g), {}
    for t in ts.trees:
        for e in t.edges:
            load[e] = load.get(e, 0.0) + t.weight
    return max(w / cap[e] for e, w in load.items())


def failure_checks(work: Path) -> list[dict]:
    """answers.yaml against a rerun of the controller's reroute on the lab's default topology."""
    import yaml

    from controller import topologies
    from controller.trees import compute
    from ground.runspec import RunSpec

    path = work / "answers.yaml"
    try:
        ans = yaml.safe_load(path.read_text()) or {}
    except (OSError, yaml.YAMLError) as exc:
        return [result("answers.yaml readable", False, str(exc))]
    spec = RunSpec(workers=8, topology="fattree", tree="rat")
    g = topologies.for_run(spec)
    before = compute(spec.tree, g, epoch=0)
    out = []

    def same(field: str, got, want, why: str) -> None:
        if got is None or got == []:
            out.append(result(field, False, f"{field} is not answered yet ({why})"))
        else:            # the expected value is not printed: it is the answer
            ok = got == want
            out.append(result(field, ok, "" if ok else f"{field}: {got!r} does not match a rerun of the "
                                                       f"controller with your failed_link ({why})"))

    same("epoch_before", ans.get("epoch_before"), before.epoch, "`trees` before the failure")
    same("roots_before", _names(ans.get("roots_before")), sorted(t.root for t in before.trees),
         "`trees` lists one root per tree")
    link = ans.get("failed_link")
    if not (isinstance(link, list) and len(link) == 2 and g.has_edge(*link)):
        out.append(result("failed_link", False, f"failed_link must be [A, B], a link of the lab's topology; got {link!r}"))
        return out
    on_tree = any(t.uses(*link) for t in before.trees)
    out.append(result("failed_link is on an active tree", on_tree,
                      "" if on_tree else f"{link[0]}-{link[1]} is on no active tree: cutting it changes nothing; "
                                         f"pick an edge printed by `trees`"))
    g.edges[link[0], link[1]]["up"] = False
    after = compute(spec.tree, g, epoch=before.epoch + 1)
    same("epoch_after", ans.get("epoch_after"), after.epoch, "one reroute = one new epoch")
    same("roots_after", _names(ans.get("roots_after")), sorted(t.root for t in after.trees),
         "`trees` after the reroute")
    ms = ans.get("reroute_ms")
    ok = isinstance(ms, (int, float)) and not isinstance(ms, bool) and 0 < ms < 60_000
    out.append(result("reroute_ms measured", ok, "" if ok else f"reroute_ms: {ms!r} is not a time in ms; take it "
                                                               "from `events`: the time of `rerouted` minus the "
                                                               "time of `link_down`, in milliseconds"))
    why = str(ans.get("why_epoch") or "").strip()
    words = why.lower().split()
    missing = [what for what, found in
               (("at least a sentence (8 words)", len(words) >= 8),
                ("the word epoch", any("epoch" in w for w in words)),
                ("what happens to packets of the old (stale, previous) epoch",
                 any(w.strip(".,;:()") in ("old", "stale", "previous", "earlier", "former") for w in words)))
               if not found]
    out.append(result("why_epoch explained", not missing,
                      "" if not missing else "why_epoch: explain why the epoch changes and what the switches "
                                             "and agents do with packets of the old epoch; missing: "
                                             + "; ".join(missing)))
    return out


def _names(value):
    return sorted(str(v) for v in value) if isinstance(value, list) else value


# -- the runner ----------------------------------------------------------------------------
def run(number: int, overlay: Path, work: Path, bmv2: str) -> list[dict]:
    from agglab.exercise import get

    ex = get(number)
    checks = load_overlay(overlay)
    if checks:
        return checks
    use_bmv2, why = bmv2_plan(ex, bmv2)
    checks = regions_filled(ex, overlay, use_bmv2, why)
    if number in VECTORS:
        from agglab.testkit.soft_target import SoftTarget

        checks += conformance(SoftTarget(), VECTORS[number], True, "software switch")
    if number == 1:
        checks.append(explain(dense_allreduce("allreduce 4 workers (software switch)"), ABOUT["allreduce"]))
    elif number == 2:
        checks.append(explain(dense_allreduce("allreduce 4 workers at 5% loss (software switch)", loss=0.05, seed=3),
                              ABOUT["loss"]))
        checks.append(explain(two_allreduces("two allreduces in a row (software switch)"), ABOUT["two calls"]))
    elif number == 3:
        checks.append(explain(sparse_allreduce("sparse allreduce 4 workers (software switch)"), ABOUT["sparse"]))
    elif number == 4:
        checks += tree_checks()
    elif number == 5:
        checks += failure_checks(work)
    if use_bmv2:
        checks += bmv2_checks(ex, overlay)
    elif ex.p4 and bmv2 == "yes":
        checks.append(result("BMv2", False, why))
    return checks


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m agglab.exercise_checks")
    ap.add_argument("number", type=int)
    ap.add_argument("--overlay", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--bmv2", choices=["auto", "yes", "no"], default="auto")
    args = ap.parse_args(argv)
    if str(REPO) not in sys.path:               # the project's modules, the overlay's originals
        sys.path.insert(0, str(REPO))
    checks = run(args.number, Path(args.overlay), Path(args.work), args.bmv2)
    print(json.dumps(checks))
    return 0


if __name__ == "__main__":
    sys.exit(main())
