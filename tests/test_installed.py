"""agglab installed as a Python user installs it, not only run from the checkout.

Why: the packet format is read from the P4 source, the exercise checker grades with the
conformance vectors and the in-process harnesses, and the experiments read their YAML
definitions: an install that lacks any of them (a file not declared as package data, or a
product module importing tests/, which is not installed) fails only for users. So this test
copies the project's files (those git tracks or would track, as a fresh clone has them),
`pip install`s that copy (not editable) into a fresh venv, and runs agglab from another
directory, with no PYTHONPATH, so nothing can come from the checkout. The install is one
top-level package, `agglab`, with the repository's folders inside it (setup.py).

Offline: the install uses no package index (`--no-index --no-build-isolation --no-deps`): the
build backend is the system's setuptools, and the dependencies are those already installed,
the system's (`--system-site-packages`) and the test environment's (its site-packages on the
new venv's path, after the venv's own). As root it runs in a network namespace of its own, so
it cannot reach the network even by mistake.
"""

from __future__ import annotations

import json
import os
import shutil
import site
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.slow


def _clean_env() -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    return env


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """(the installed `agglab` script, a working directory outside the checkout)."""
    root = tmp_path_factory.mktemp("installed")
    files = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=REPO,
                           capture_output=True, check=True).stdout.decode().split("\0")
    src = root / "src"
    for rel in filter(None, files):
        if (REPO / rel).is_file():
            (src / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / rel, src / rel)
    venv = root / "venv"
    python = "/usr/bin/python3" if Path("/usr/bin/python3").exists() else sys.executable
    subprocess.run([python, "-m", "venv", "--system-site-packages", str(venv)], check=True)
    venv_site = next((venv / "lib").glob("python3*/site-packages"))
    # the dependencies this test environment already has; a path line, so none of its own .pth
    # files (the checkout's editable install) is read
    (venv_site / "zz-test-dependencies.pth").write_text("".join(f"{p}\n" for p in site.getsitepackages()))
    offline = ["unshare", "--net"] if os.geteuid() == 0 and shutil.which("unshare") else []
    pip = subprocess.run([*offline, str(venv / "bin" / "pip"), "install", "-q", "--no-index", "--no-build-isolation",
                          "--no-deps", str(src)], cwd=root, capture_output=True, text=True,
                         env=dict(_clean_env(), PIP_NO_INDEX="1", PIP_FIND_LINKS="",
                                  HTTP_PROXY="http://127.0.0.1:9", HTTPS_PROXY="http://127.0.0.1:9"))
    assert pip.returncode == 0, pip.stderr[-3000:]
    shutil.rmtree(src)                       # nothing may be read from the copy either
    work = root / "elsewhere"
    work.mkdir()
    return venv / "bin" / "agglab", work


def _run(installed, *args, timeout=600) -> subprocess.CompletedProcess:
    agglab, work = installed
    return subprocess.run([str(agglab), *args], cwd=work, capture_output=True, text=True, timeout=timeout,
                          env=_clean_env())


def test_the_installed_agglab_is_not_the_checkout(installed):
    agglab, work = installed
    out = subprocess.run([str(agglab.parent / "python"), "-c",
                          "import agglab, agglab.ground.paths as p; print(agglab.__file__); print(p.P4SRC)"],
                         cwd=work, capture_output=True, text=True, env=_clean_env(), check=True).stdout.split()
    assert all("site-packages" in line and str(REPO) not in line for line in out), out


FOLDERS = ("ground", "softswitch", "hosts", "pace", "controller", "emulation", "experiments", "p4src", "exercises")
PRODUCT = ("agglab", *FOLDERS)


def _site(installed) -> Path:
    return next((installed[0].parent.parent / "lib").glob("python3*/site-packages"))


def test_one_top_level_package(installed):
    """The install adds one name to site-packages, `agglab`: the repository's folders are its
    subpackages (agglab.controller is controller/), not top-level packages named `controller` or
    `hosts` that another distribution could shadow or be shadowed by."""
    site = _site(installed)
    top_level = next(site.glob("agglab-*.dist-info/top_level.txt")).read_text().split()
    assert top_level == ["agglab"], top_level
    assert not [f for f in FOLDERS if (site / f).exists()], sorted(p.name for p in site.iterdir())
    agglab, work = installed
    out = subprocess.run([str(agglab.parent / "python"), "-c",
                          "import agglab, agglab.controller.trees as t, agglab.softswitch.pipeline as p; "
                          "print(agglab.__path__); print(t.__file__); print(p.__file__)"],
                         cwd=work, capture_output=True, text=True, env=_clean_env(), check=True).stdout.split("\n")
    assert out[0] == repr([str(site / "agglab")]), out         # nothing added from a checkout beside it
    assert out[1] == str(site / "agglab" / "controller" / "trees" / "__init__.py"), out
    assert out[2] == str(site / "agglab" / "softswitch" / "pipeline.py"), out


def test_every_file_of_the_product_is_installed(installed):
    """Each file git tracks under a product directory (code and data: P4, vectors, YAML,
    exercise texts, web assets) is in site-packages under agglab/ at the same relative path
    (controller/job.py as agglab/controller/job.py): a data file added without declaring it in
    pyproject.toml fails here, not for a user."""
    site = _site(installed)
    tracked = subprocess.run(["git", "ls-files", *PRODUCT], cwd=REPO, capture_output=True, text=True,
                             check=True).stdout.split()
    where = {rel: site / rel if rel.startswith("agglab/") else site / "agglab" / rel for rel in tracked}
    missing = [rel for rel, path in where.items() if not path.is_file()]
    assert tracked and not missing, f"not installed by `pip install .`: {missing}"


def test_exercise_start_and_check_outside_the_checkout(installed):
    start = _run(installed, "exercise", "start", "1", "--dir", "ex1")
    assert start.returncode == 0, start.stderr
    assert (installed[1] / "ex1" / "softswitch" / "aggregate.py").is_file()
    assert (installed[1] / "ex1" / "README.md").is_file()
    skeleton = _run(installed, "exercise", "check", "1", "--dir", "ex1")
    assert skeleton.returncode == 1, skeleton.stdout + skeleton.stderr       # graded, not crashed
    assert "FAIL  region aggregate-add" in skeleton.stdout and "crashed" not in skeleton.stdout
    assert _run(installed, "exercise", "solution", "1", "--dir", "sol1").returncode == 0
    solved = _run(installed, "exercise", "check", "1", "--dir", "sol1", "--json")
    assert solved.returncode == 0, solved.stdout[-3000:] + solved.stderr[-3000:]
    grade = json.loads(solved.stdout)
    names = [c["name"] for c in grade["checks"]]
    assert any(n.startswith("conformance first_contribution") for n in names), names
    assert any(n.startswith("allreduce 4 workers") for n in names), names


def test_experiment_dry_run_outside_the_checkout(installed):
    out = _run(installed, "experiment", "quick", "--dry-run")
    assert out.returncode == 0, out.stderr
    plan = out.stdout + out.stderr
    assert "quick:" in plan and "trend(s)" in plan and "switchml:" in plan, plan


def test_the_c_fast_path_is_built_where_there_is_a_compiler(installed):
    """`pip install .` builds softswitch/fastdense.c and hosts/fastagent.c with the machine's
    gcc (setup.py): the installed switch and agents run their hot paths in C (softswitch/native.py,
    hosts/native.py); without gcc they would say they run the Python path, and this test names which."""
    agglab, work = installed
    for package in ("softswitch", "hosts"):
        out = subprocess.run([str(agglab.parent / "python"), "-c",
                              f"from agglab.{package} import native; print(native.AVAILABLE); print(native.describe())"],
                             cwd=work, capture_output=True, text=True, env=_clean_env(), check=True).stdout.split("\n")
        assert out[0] == str(bool(shutil.which("gcc") or shutil.which("cc"))), out


@pytest.mark.root
@pytest.mark.mininet
@pytest.mark.net_timeout(600)
def test_allreduce_outside_the_checkout(installed):
    from tests.leftovers import leftovers, new_leftovers

    before = leftovers()
    out = _run(installed, "allreduce", "--workers", "2", "--elements", "1000", "--json", timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout)
    assert result["ok"] and result["exact"] and result["workers"] == 2 and result["elements"] == 1000
    assert not any(new_leftovers(before).values()), new_leftovers(before)
