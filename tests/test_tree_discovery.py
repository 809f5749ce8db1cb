"""A tree algorithm is one module: `controller/trees/NAME.py` is usable as `--tree NAME`
with no other file edited (the controller discovers its modules by name and registers them
with the run spec's check; the CLI's choices come from the same discovery)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

from agglab.ground.paths import REPO

PACKAGES = ("agglab", "controller", "emulation", "experiments", "ground", "hosts", "pace", "softswitch", "p4src")

PROBE = r"""
import json, sys
from agglab.cli import build_parser
from agglab.run_options import spec_from_args
from agglab.controller import topologies, trees
from agglab.controller.topology import workers

args = build_parser().parse_args(["allreduce", "--tree", "mytree", "--topology", "fattree", "--k", "4",
                                  "--workers", "4"])
spec = spec_from_args(args).validate()
g = topologies.for_run(spec)
ts = trees.compute(spec.tree, g, workers(g))
rejected = None
try:
    build_parser().parse_args(["allreduce", "--tree", "nosuchtree"])
except SystemExit as exc:
    rejected = exc.code
print(json.dumps({"tree": spec.tree, "algorithms": list(trees.TREE_ALGORITHMS), "trees": len(ts.trees),
                  "edges": sorted(map(list, ts.trees[0].edges)), "rejected": rejected,
                  "from": trees.__file__}))
"""


def test_a_copied_tree_module_is_a_tree_choice(tmp_path: Path):
    for name in PACKAGES:
        shutil.copytree(REPO / name, tmp_path / name, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(tmp_path / "controller" / "trees" / "spt.py", tmp_path / "controller" / "trees" / "mytree.py")
    out = subprocess.run([sys.executable, "-c", PROBE], cwd=tmp_path, env={"PYTHONPATH": str(tmp_path),
                         "PATH": "/usr/bin:/bin"}, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    assert got["from"].startswith(str(tmp_path))           # the scratch copy ran, not the checkout
    assert got["tree"] == "mytree" and "mytree" in got["algorithms"]
    assert got["rejected"] == 2                              # an unknown name is still refused
    # the copy computes what spt computes on the same graph
    from agglab.controller import topologies, trees
    from agglab.controller.topology import workers
    from agglab.ground.runspec import RunSpec

    g = topologies.for_run(RunSpec(topology="fattree", k=4, workers=4))
    spt = trees.compute("spt", g, workers(g))
    assert got["trees"] == len(spt.trees) and got["edges"] == sorted(map(list, spt.trees[0].edges))
    assert "mytree" not in trees.TREE_ALGORITHMS                  # the checkout itself is untouched


def test_the_checkout_discovers_its_tree_modules():
    from agglab.controller import trees
    from agglab.ground import runspec

    assert set(trees.TREE_ALGORITHMS) == {"spt", "rat", "packing", "bml"}
    assert runspec.TREES == list(trees.TREE_ALGORITHMS)
