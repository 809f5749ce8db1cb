"""The layering stays true: every import of a project package goes down the layers.

Layers, bottom up (docs/design/layout.md "Layout"):
  0 ground                 packet format, run directories, addresses, run description
  1 softswitch, hosts,     data plane and host agents; PACE and the training-iteration
    pace                   model (pure: profiles, schedulers, fusion, timelines)
  2 controller             topology graph, trees, switch clients, jobs, failover
  3 emulation              Mininet builder, switch nodes, P4 build, link monitor, failures, session
  4 agglab, experiments    the program: CLI, lab, benchmarks; experiment sweeps and reports
  5 exercises              the exercises' checks (exercises/<N>-<slug>/check.py): plug-ins of
                           `agglab exercise`, which loads them from their folders by path, never
                           by import; they use agglab's exercise kit and test kit, so they sit
                           above agglab, and import only what agglab may import (agglab itself
                           and layers 0-3, never experiments)

A package may import its own modules and any package of a lower layer; never one of its
own layer or above. No two modules import each other, directly or round a circle, even
through an import inside a function (such an import only hides the circle: which module
loads first then decides whether a name exists yet), nor through a package that loads its
modules by name as it is imported (`discovered`). Run `python tests/test_layers.py` to
print each package's layer and what it imports, and any circle.

Every package is imported under the one namespace `agglab` (agglab/__init__.py): the folder
controller/ is the package `agglab.controller`, layer 2, while `agglab.cli` is agglab's own
module, layer 4. The namespace's __init__ is run by every import and so imports nothing of the
project, and no file imports a folder by its name alone (that would load a second copy of the
module beside `agglab.controller`'s, or another distribution's package of the same name).
"""

from __future__ import annotations

import ast
import importlib.util
import sys
from collections import defaultdict
from pathlib import Path

import networkx as nx

REPO = Path(__file__).resolve().parent.parent
NAMESPACE = "agglab"
LAYERS = {"ground": 0, "softswitch": 1, "hosts": 1, "pace": 1, "controller": 2, "emulation": 3,
          "agglab": 4, "experiments": 4, "exercises": 5}


def package_of(name: str) -> str | None:
    """The layered package a dotted module name is in: agglab.controller.trees -> controller,
    agglab.cli and agglab itself -> agglab; None for what is not the project's (os, numpy, and a
    bare `controller`, which test_no_import_bypasses_the_namespace refuses)."""
    parts = name.split(".")
    if parts[0] != NAMESPACE:
        return None
    return parts[1] if len(parts) > 1 and parts[1] in LAYERS else NAMESPACE


def imported_names(path: Path) -> list[str]:
    """The absolute module names a file imports, module level and inside functions;
    `from agglab import controller` names agglab.controller, `from agglab import __version__` agglab."""
    names = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names += ([f"{node.module}.{a.name}" for a in node.names] if node.module == NAMESPACE
                      else [node.module])
    return names


def imports_of(path: Path) -> set[str]:
    """Layered packages a file imports (module level and inside functions)."""
    return {package_of(n) for n in imported_names(path)} - {None}


def product_files(repo: Path = REPO) -> list[Path]:
    """Every .py file of the layered packages under `repo` (the repository, or a scratch tree)."""
    return [f for pkg in LAYERS for f in sorted((repo / pkg).rglob("*.py"))]


def package_imports(repo: Path = REPO) -> dict[str, dict[str, list[str]]]:
    """package -> imported package -> files that import it."""
    edges: dict[str, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    for f in product_files(repo):
        pkg = f.relative_to(repo).parts[0]
        for other in imports_of(f) - {pkg}:
            edges[pkg][other].append(str(f.relative_to(repo)))
    return edges


def module_name(path: Path, repo: Path = REPO) -> str:
    """agglab/web/server.py -> agglab.web.server, controller/trees/rat.py ->
    agglab.controller.trees.rat; a package's __init__.py is the package."""
    parts = path.relative_to(repo).with_suffix("").parts
    parts = parts if parts[0] == NAMESPACE else (NAMESPACE, *parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules_imported(path: Path, modules: set[str], repo: Path = REPO) -> set[str]:
    """The project modules (of `modules`) a file imports, module level and inside functions:
    `from a.b import c` is module a.b.c when there is one, else a.b; `import a.b.c` whose
    tail is no module is its longest prefix that is one."""
    here = module_name(path, repo)
    package = here if path.name == "__init__.py" else here.rpartition(".")[0]

    def known(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    found = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found |= {known(a.name) for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:                       # relative: from the file's package upwards
                up = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join([*up, base] if base else up)
            found |= {f"{base}.{a.name}" if f"{base}.{a.name}" in modules else known(base) for a in node.names}
    return found - {None, here}


def discovered(path: Path, modules: set[str], repo: Path = REPO) -> set[str]:
    """The modules a package loads by name as it is imported (`importlib.import_module(
    f"{__name__}.{name}")` at module level: controller/schemes, hosts/schemes, ...): every module
    directly in it but __main__, since which ones is decided as it runs. Why count them: a circle
    closed through such a discovery is still a circle, and no import statement shows it.
    (A discovery inside a function, as controller/trees' compute, loads at call time: not counted.)"""
    if path.name != "__init__.py":
        return set()
    package = module_name(path, repo)
    tree = ast.parse(path.read_text(), filename=str(path))
    at_import: list[ast.Call] = []
    stack = list(tree.body)
    while stack:                                   # module-level code, not function or class bodies
        node = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            continue
        if isinstance(node, ast.Call):
            at_import.append(node)
        stack.extend(ast.iter_child_nodes(node))

    def by_name(call: ast.Call) -> bool:
        name = call.func.attr if isinstance(call.func, ast.Attribute) else getattr(call.func, "id", "")
        first = call.args[0] if call.args else None
        if name != "import_module" or not isinstance(first, ast.JoinedStr) or not first.values:
            return False
        head = first.values[0]
        if isinstance(head, ast.FormattedValue):
            return isinstance(head.value, ast.Name) and head.value.id == "__name__"
        return isinstance(head, ast.Constant) and str(head.value).startswith(package + ".")

    if not any(by_name(c) for c in at_import):
        return set()
    return {m for m in modules if m.startswith(package + ".") and "." not in m[len(package) + 1:]
            and not m.endswith(".__main__")}


def module_imports(repo: Path = REPO) -> nx.DiGraph:
    """module -> module it imports (or finds by name, `discovered`), over the layered packages under `repo`."""
    files = {module_name(f, repo): f for f in product_files(repo)}
    g = nx.DiGraph()
    g.add_nodes_from(files)
    g.add_edges_from((name, other) for name, f in files.items()
                     for other in modules_imported(f, set(files), repo) | discovered(f, set(files), repo))
    return g


def module_circles(repo: Path = REPO) -> list[list[str]]:
    """Each group of modules that import each other round a circle (a strongly connected
    component of the import graph), as one circle through it: [a, b, c] is a -> b -> c -> a."""
    g = module_imports(repo)
    circles = []
    for group in nx.strongly_connected_components(g):
        if len(group) > 1:
            circle = [u for u, _ in nx.find_cycle(g.subgraph(group), source=min(group))]
            first = circle.index(min(circle))
            circles.append(circle[first:] + circle[:first])
    return sorted(circles)


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


def test_no_import_circles_between_modules():
    assert module_circles() == []


def test_the_checker_catches_a_circle_between_modules(tmp_path):
    """The test above would be vacuous if it could not see a circle: plant one, closed by an
    import inside a function, beside modules that import into it without being part of it."""
    for pkg in LAYERS:
        (tmp_path / pkg).mkdir()
        (tmp_path / pkg / "__init__.py").write_text("")
    (tmp_path / "agglab" / "web").mkdir()
    (tmp_path / "agglab" / "web" / "__init__.py").write_text("")
    (tmp_path / "agglab" / "cli.py").write_text("from agglab.lab import run_lab\nfrom agglab.ground import wire\n")
    (tmp_path / "agglab" / "lab.py").write_text("import agglab.web.server\n")
    (tmp_path / "agglab" / "web" / "server.py").write_text("def serve():\n    from agglab import cli\n")
    (tmp_path / "agglab" / "draw.py").write_text("from agglab.cli import main\n")
    (tmp_path / "ground" / "wire.py").write_text("import json\n")
    assert module_imports(tmp_path).has_edge("agglab.cli", "agglab.ground.wire")
    assert module_circles(tmp_path) == [["agglab.cli", "agglab.lab", "agglab.web.server"]]
    (tmp_path / "agglab" / "web" / "server.py").write_text("def serve():\n    from agglab import actions\n")
    assert module_circles(tmp_path) == []


def test_the_checker_catches_a_circle_through_a_discovery(tmp_path):
    """A package that loads its modules by name as it is imported (as controller/schemes does)
    imports them all, though no statement says so: a module of it that imports back into the
    package through another module closes a circle (as reroute/carry.py once did)."""
    for pkg in LAYERS:
        (tmp_path / pkg).mkdir()
        (tmp_path / pkg / "__init__.py").write_text("")
    schemes = tmp_path / "controller" / "schemes"
    schemes.mkdir()
    (schemes / "__init__.py").write_text(
        "import importlib\n\nMODULES = {n: importlib.import_module(f\"{__name__}.{n}\") for n in ('dense',)}\n")
    (schemes / "dense.py").write_text("from agglab.controller import carry\n")
    (tmp_path / "controller" / "carry.py").write_text("from agglab.controller.schemes import MODULES\n")
    assert module_circles(tmp_path) == [["agglab.controller.carry", "agglab.controller.schemes",
                                         "agglab.controller.schemes.dense"]]
    (tmp_path / "controller" / "carry.py").write_text("import json\n")
    assert module_circles(tmp_path) == []
    (schemes / "__init__.py").write_text(           # loaded when called, not when imported: not counted
        "import importlib\n\ndef load(n):\n    return importlib.import_module(f\"{__name__}.{n}\")\n")
    (tmp_path / "controller" / "carry.py").write_text("from agglab.controller.schemes import load\n")
    assert module_circles(tmp_path) == []


def test_exercise_checks_import_only_what_agglab_may():
    """agglab runs the checks in its checker: layer 5 is for their import of agglab, not a door
    to experiments (agglab's sideways neighbour)."""
    may = {pkg for pkg, layer in LAYERS.items() if layer < LAYERS["agglab"]} | {"agglab"}
    imported = set(package_imports().get("exercises", {}))
    assert "agglab" in imported                 # the checks are seen (exercises/*/check.py)
    assert imported <= may, imported - may


# Folders that are packages only as agglab.X (p4src/ holds no Python, but is a package too).
FOLDERS = set(LAYERS) - {NAMESPACE} | {"p4src"}
NOT_SOURCE = {"build", "results", "test-output", "logs", "pcaps"}


def python_files(repo: Path = REPO) -> list[Path]:
    """Every .py file of the checkout: the product, tests, tools, setup.py (no venv, no build output)."""
    tops = [d for d in repo.iterdir() if d.is_dir() and not d.name.startswith(".") and d.name not in NOT_SOURCE]
    return sorted([*repo.glob("*.py"), *(f for d in tops for f in d.rglob("*.py"))])


def namespace_bypasses(repo: Path = REPO) -> list[str]:
    """`file: name` for each import of a folder by its name alone (the folder controller/
    imported as `controller`, not `agglab.controller`): it works from the checkout's root, where
    the folder is on sys.path too, and fails when installed, or loads the module a second time
    beside agglab's."""
    return [f"{f.relative_to(repo)}: {name}" for f in python_files(repo) for name in imported_names(f)
            if name.split(".")[0] in FOLDERS]


def test_no_import_bypasses_the_namespace(tmp_path):
    assert namespace_bypasses() == []
    (tmp_path / "tests").mkdir()
    bare = "hosts"              # outside the literal: a search-and-replace of imports must not mend it
    (tmp_path / "tests" / "test_x.py").write_text(f"import agglab.hosts.agent\ndef f():\n    from {bare} import agent\n")
    (tmp_path / "agglab").mkdir()
    (tmp_path / "agglab" / "ok.py").write_text("from agglab import controller\nimport controllers\n")
    assert namespace_bypasses(tmp_path) == ["tests/test_x.py: hosts"]


def test_the_namespace_imports_nothing_of_the_project():
    """agglab/__init__.py runs before every agglab.X: an import of the project there would load
    the CLI's layer under layer 0; the standard library only, so `import agglab.ground` stays cheap."""
    names = imported_names(REPO / NAMESPACE / "__init__.py")
    assert all(n.split(".")[0] in sys.stdlib_module_names for n in names), names


def test_each_folder_is_the_namespace_s_subpackage():
    """From the checkout agglab.X is the folder X/ beside agglab/ (agglab/__init__.py extends
    its __path__ with the repository's root): the same files as an install's."""
    for pkg in sorted(FOLDERS):
        spec = importlib.util.find_spec(f"{NAMESPACE}.{pkg}")
        assert spec is not None and REPO / pkg in map(Path, spec.submodule_search_locations), (pkg, spec)


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
    (tmp_path / "ground" / "bad.py").write_text("def f():\n    from agglab.controller import job\n")
    (tmp_path / "hosts" / "side.py").write_text("import agglab.softswitch.pipeline\n")
    bad = violations(package_imports(tmp_path))
    assert len(bad) == 2
    assert any(b.startswith("ground (layer 0) imports controller (layer 2)") for b in bad)
    assert any(b.startswith("hosts (layer 1) imports softswitch (layer 1)") for b in bad)


if __name__ == "__main__":
    edges = package_imports()
    for pkg, layer in sorted(LAYERS.items(), key=lambda kv: (kv[1], kv[0])):
        print(f"layer {layer}  {pkg:12s} imports {', '.join(sorted(edges.get(pkg, {}))) or '-'}")
    problems = violations(edges) + [" -> ".join([*c, c[0]]) for c in module_circles()]
    print("\n".join(problems) or "no upward or sideways imports, no circles")
    sys.exit(1 if problems else 0)
