"""An import inside a function says why it is there: `# lazy: <reason>` on its line.

Why: an import inside a function used to be how a circle was closed (tests/test_layers.py now
fails on a circle however it is closed), and hides what a module needs. The one reason left
for one is start-up: a heavy or optional library (Mininet, scapy, matplotlib, aiohttp, BMv2's
Thrift modules, ...) or a module that loads one, kept out of a command or module that does not
always need it. Such an import carries its reason on its line; any other import belongs at
the top of its module.
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.test_layers import LAYERS, REPO, product_files

MARK = "# lazy:"


def unexplained_function_imports(repo: Path = REPO) -> list[str]:
    """`path:line: statement` for each import inside a function (or lambda) of the layered
    packages under `repo` with no `# lazy: <reason>` on any line of the statement."""
    bad = []
    for f in product_files(repo):
        text = f.read_text()
        lines = text.splitlines()
        tree = ast.parse(text, filename=str(f))
        for func in ast.walk(tree):
            if not isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                continue
            for node in ast.walk(func):
                if not isinstance(node, (ast.Import, ast.ImportFrom)):
                    continue
                statement = lines[node.lineno - 1:node.end_lineno]
                reason = next((line.split(MARK, 1)[1].strip() for line in statement if MARK in line), "")
                if not reason:
                    bad.append(f"{f.relative_to(repo)}:{node.lineno}: {statement[0].strip()}")
    return sorted(set(bad))


def test_every_import_inside_a_function_says_why_it_is_lazy():
    bad = unexplained_function_imports()
    assert bad == [], ("move these to the top of their module, or say on the line why they wait "
                       "(`# lazy: <reason>`):\n" + "\n".join(bad))


def test_the_checker_sees_an_unexplained_import(tmp_path):
    """The test above would be vacuous if it could not see one: plant some, nested and not."""
    for pkg in LAYERS:
        (tmp_path / pkg).mkdir()
        (tmp_path / pkg / "__init__.py").write_text("")
    (tmp_path / "agglab" / "cmd.py").write_text(
        "import json\n\n\n"
        "def run():\n"
        "    from mininet.net import Mininet  # lazy: Mininet, only where a network is built\n"
        "    import shlex\n"
        "    if True:\n"
        "        from agglab.ground import (\n"
        "            wire,\n"
        "        )\n"
        "    from scapy.all import Ether  # lazy:\n"
        "\n\n"
        "class A:\n"
        "    def m(self):\n"
        "        def inner():\n"
        "            import numpy  # lazy: numpy, only inner() needs it\n"
        "        from agglab.hosts import (  # lazy: loads numpy\n"
        "            agent,\n"
        "        )\n")
    assert unexplained_function_imports(tmp_path) == [
        "agglab/cmd.py:11: from scapy.all import Ether  # lazy:",     # a mark with no reason
        "agglab/cmd.py:6: import shlex",
        "agglab/cmd.py:8: from agglab.ground import (",
    ]
