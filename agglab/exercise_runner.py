"""The checker of `agglab exercise check`, run in a fresh interpreter with the student's code.

    python -m agglab.exercise_runner FOLDER --overlay DIR --work DIR [--bmv2 auto|yes|no]

FOLDER is the exercise's folder (exercises/<N>-<slug>/, agglab/exercise_folders.py). Why a
separate interpreter: the student's modules are loaded *in place of* the project's
(sys.modules, before anything imports them) from the overlay folder agglab/exercise.py built,
so nothing in the repo is modified and a crash or endless loop in student code cannot take
the CLI down. Prints one JSON list of {name, ok, detail} as its last line.

What runs, for every exercise the same: the regions are filled in (no TODO left); the
exercise's conformance vectors (its VECTORS) on the software switch (in process); the
exercise's own checks (its check.py: an end-to-end allreduce through the software switch with
real agents, trees against a rerun of the controller's algorithms, answers against a rerun of
the controller); for P4 exercises, the same vectors on BMv2 with the student's P4 compiled from
an overlay p4src (needs simple_switch, p4c and root), then an allreduce in Mininet through
simple_switch running it. A failed check's detail starts with the first differing packet field
or register; the frames in full are in "packets".
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
from pathlib import Path

from agglab.exercise import TODO, regions
from agglab.exercise_folders import Exercise, load
from agglab.exercise_kit import conformance, result, short_error
from agglab.ground.interrupts import run_interruptible
from agglab.ground.paths import P4SRC
from agglab.ground.runspec import RunSpec


def module_of(rel: Path) -> str:
    """The module a repo-relative file is: hosts/slots.py is agglab.hosts.slots (the folders are
    the namespace's subpackages, agglab/__init__.py), agglab/lab.py is agglab.lab."""
    parts = rel.with_suffix("").parts
    return ".".join(parts if parts[0] == "agglab" else ("agglab", *parts))


class OverlayFinder(importlib.abc.MetaPathFinder):
    """Finds the overlay's files first: `agglab.hosts.slots` is overlay/hosts/slots.py when it exists."""

    def __init__(self, overlay: Path):
        self.files = {module_of(p.relative_to(overlay)): p for p in overlay.rglob("*.py")}

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


def regions_filled(ex: Exercise, overlay: Path, p4_graded: bool, why: str) -> list[dict]:
    """No TODO left in the student's regions. P4 regions are only graded where BMv2 runs: on a
    machine without it the Python twin is the exercise, and the P4 regions are shown as SKIP."""
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


def bmv2_plan(ex: Exercise, mode: str) -> tuple[bool, str]:
    """(run the BMv2 checks?, why not)."""
    if not ex.p4 or mode == "no":
        return False, "--bmv2 no" if ex.p4 else ""
    from agglab.testkit.bmv2_target import find_tools  # lazy: loads numpy, only bmv2_plan() needs it

    if find_tools() is None:
        return False, "BMv2 simple_switch/p4c not found (PATH or /opt/p4/bin)"
    if os.geteuid() != 0:
        return False, "BMv2 checks need root (a network namespace)"
    return True, ""


def bmv2_checks(ex: Exercise, overlay: Path) -> list[dict]:
    """The exercise's vectors on BMv2, compiled from the repo's p4src with the student's files."""
    import agglab.testkit.bmv2_target as bt  # lazy: loads numpy, only bmv2_checks() needs it

    tools = bt.find_tools()
    src = overlay / "bmv2-p4src"
    shutil.copytree(P4SRC, src)
    for rel in ex.files:
        if rel.endswith(".p4"):
            shutil.copy(overlay / rel, src / Path(rel).relative_to("p4src"))
    bt.P4SRC = src                     # compile_p4 reads it at call time: the include override
    work = overlay / "bmv2"
    work.mkdir()
    from agglab.testkit.vectors import VECTOR_DIR, load as load_vector  # lazy: loads PyYAML, only bmv2_checks() needs it

    ports = set()
    for name in ex.vectors:
        ports |= load_vector(VECTOR_DIR / f"{name}.yaml").ports
    target = bt.Bmv2Target(tools, work, max(ports) + 1)
    try:
        target.start()
    except RuntimeError as exc:
        return [result("your P4 compiles (p4c)", False, str(exc)[-2000:])]
    try:
        out = [result("your P4 compiles (p4c)", True)] + conformance(target, ex.vectors, False, "BMv2")
    finally:
        target.close()
    return out + [bmv2_allreduce(ex.bmv2_run, target.json)]


def bmv2_allreduce(kw: dict, json_path: Path) -> dict:
    """One allreduce by 4 workers in Mininet (one switch) through simple_switch running the
    student's compiled P4 (`kw`: the exercise's BMV2_RUN, RunSpec fields); the workers are the
    project's agents (hosts/ in the repo)."""
    name = (f"allreduce 4 workers x {kw['elements']} int32{', ' + kw['algorithm'] if 'algorithm' in kw else ''}"
            f"{', loss ' + format(kw['loss'], '.0%') if 'loss' in kw else ''} (BMv2, Mininet)")
    if shutil.which("mnexec") is None:
        return {**result(name, True, "Mininet (mnexec) not found: the allreduce on BMv2 needs it"), "skipped": True}
    import agglab.emulation.p4build as p4build  # lazy: loads numpy, only bmv2_allreduce() needs it
    from agglab.emulation.session import run_spec  # lazy: loads numpy, networkx, PyYAML, pyroute2, only bmv2_allreduce() needs it

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


def run(folder: Path, overlay: Path, work: Path, bmv2: str) -> list[dict]:
    checks = load_overlay(overlay)      # first: the student's modules before any check imports the project's
    if checks:
        return checks
    ex = load(folder)
    use_bmv2, why = bmv2_plan(ex, bmv2)
    checks = regions_filled(ex, overlay, use_bmv2, why)
    if ex.vectors:
        from agglab.testkit.soft_target import SoftTarget  # lazy: loads numpy, only run() needs it

        checks += conformance(SoftTarget(), ex.vectors, True, "software switch")
    checks += ex.checks(work)
    if use_bmv2:
        checks += bmv2_checks(ex, overlay)
    elif ex.p4 and bmv2 == "yes":
        checks.append(result("BMv2", False, why))
    return checks


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m agglab.exercise_runner")
    ap.add_argument("folder", help="the exercise's folder, exercises/<N>-<slug>")
    ap.add_argument("--overlay", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--bmv2", choices=["auto", "yes", "no"], default="auto")
    args = ap.parse_args(argv)

    def checks() -> int:
        print(json.dumps(run(Path(args.folder), Path(args.overlay), Path(args.work), args.bmv2)))
        return 0

    # a stop signal unwinds the BMv2 switch and the Mininet network as it does for `agglab
    # allreduce` (agglab/exercise.py stop_checker sends SIGTERM; a Ctrl-C reaches both processes)
    return run_interruptible("exercise check", checks)


if __name__ == "__main__":
    sys.exit(main())
