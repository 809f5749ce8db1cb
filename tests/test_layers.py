"""The layering stays true: every import of a project package goes down the layers.

Layers, bottom up (docs/design.md "Layout"):
  0 ground                 packet format, run directories, addresses, run description
  1 softswitch, hosts,     data plane and host agents; PACE and the training-iteration
    pace                   model (pure: profiles, schedulers, fusion, timelines)
  2 controller             topology graph, trees, switch clients, jobs, failover
  3 emulation              Mininet builder, switch nodes, P4 build, link monitor, failures, session
  4 agglab, experiments    the program: CLI, lab, benchmarks; experiment sweeps and reports
  5 exercises              the teaching labs' checks (exercises/<N>-<slug>/check.py): plug-ins of
                           `agglab exercise`, which loads them from their folders by path, never
                           by import; they use agglab's exercise kit and test kit, so they sit
                           above agglab, and import only what agglab may import (agglab itself
                           and layers 0-3, never experiments)

A package may import its own modules and any package of a lower layer; never one of its
own layer or above. Run `python tests/test_layers.py` to print each package's layer and
what it imports.
"""

from __future__ import annotations

import ast
import sys
from collections import defaultdict
from pathlib import Path

import networkx as nx

REPO = Path(__file__).resolve().parent.parent
LAYERS = {"ground": 0, "softswitch": 1, "hosts": 1, "pace": 1, "controller": 2, "emulation": 3,
          "agglab": 4, "experiments": 4, "exercises": 5}


def imports_of(path: Path) -> set[str]:
    """Top-level project packages a file imports (module level and inside functions)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        else:
            continue
        found |= {n.split(".")[0] for n in names} & set(LAYERS)
    return found


def package_imports(repo: Path = REPO) -> dict[str, dict[str, list[str]]]:
    """package -> imported package -> files that import it."""
    edges: dict[str, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    for pkg in LAYERS:
        for f in sorted((repo / pkg).rglob("*.py")):
            for other in imports_of(f) - {pkg}:
                edges[pkg][other].append(str(f.relative_to(repo)))
    return edges


def violations(edges) -> list[str]:
    bad = []
    for pkg, targets in edges.items():
        for other, files in targets.items():
            if LAYERS[other] >= LAYERS[pkg]:
                bad.append(f"{pkg} (layer {LAYERS[pkg]}) imports {other} (layer {LAYERS[other]}) in "
                           + ", ".join(files))
    return bad


def test_every_package_has_a_layer():
    on_disk = {p.parent.name for p in REPO.glob("*/__init__.py")} | {p.parent.name for p in REPO.glob("*/__main__.py")}
    assert on_disk - {"tests"} <= set(LAYERS), f"packages without a layer: {on_disk - set(LAYERS) - {'tests'}}"


def test_imports_only_go_down():
    assert violations(package_imports()) == []


def test_no_import_cycles_between_packages():
    g = nx.DiGraph((pkg, other) for pkg, targets in package_imports().items() for other in targets)
    assert list(nx.simple_cycles(g)) == []


def test_exercise_checks_import_only_what_agglab_may():
    """agglab runs the checks in its checker: layer 5 is for their import of agglab, not a door
    to experiments (agglab's sideways neighbour)."""
    may = {pkg for pkg, layer in LAYERS.items() if layer < LAYERS["agglab"]} | {"agglab"}
    imported = set(package_imports().get("exercises", {}))
    assert "agglab" in imported                 # the checks are seen (exercises/*/check.py)
    assert imported <= may, imported - may


def product_files_importing_tests(repo: Path = REPO) -> list[str]:
    """Product files that import the tests package: it is not installed (`pip install .`), so
    such an import works in the checkout and fails for users; shared harnesses live in
    agglab/testkit/."""
    bad = []
    for pkg in LAYERS:
        for f in sorted((repo / pkg).rglob("*.py")):
            for node in ast.walk(ast.parse(f.read_text(), filename=str(f))):
                names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                         [node.module] if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module
                         else [])
                if any(n == "tests" or n.startswith("tests.") for n in names):
                    bad.append(str(f.relative_to(repo)))
    return sorted(set(bad))


def test_the_product_never_imports_tests(tmp_path):
    assert product_files_importing_tests() == []
    (tmp_path / "agglab").mkdir()
    (tmp_path / "agglab" / "grader.py").write_text("def f():\n    from tests.fakenet import FakeNet\n")
    assert product_files_importing_tests(tmp_path) == ["agglab/grader.py"]


def test_the_checker_catches_an_upward_import(tmp_path):
    """The test above would be vacuous if it could not see a violation: plant one."""
    for pkg in LAYERS:
        (tmp_path / pkg).mkdir()
        (tmp_path / pkg / "__init__.py").write_text("")
    (tmp_path / "ground" / "bad.py").write_text("def f():\n    from controller import job\n")
    (tmp_path / "hosts" / "side.py").write_text("import softswitch.pipeline\n")
    bad = violations(package_imports(tmp_path))
    assert len(bad) == 2
    assert any(b.startswith("ground (layer 0) imports controller (layer 2)") for b in bad)
    assert any(b.startswith("hosts (layer 1) imports softswitch (layer 1)") for b in bad)


if __name__ == "__main__":
    edges = package_imports()
    for pkg, layer in sorted(LAYERS.items(), key=lambda kv: (kv[1], kv[0])):
        print(f"layer {layer}  {pkg:12s} imports {', '.join(sorted(edges.get(pkg, {}))) or '-'}")
    problems = violations(edges)
    print("\n".join(problems) or "no upward or sideways imports")
    sys.exit(1 if problems else 0)
