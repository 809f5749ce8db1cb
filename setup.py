"""The packages an install holds: everything under one top-level package, `agglab`.

The repository keeps its folders side by side (ground/, softswitch/, hosts/, pace/, controller/,
emulation/, experiments/, and the data folders p4src/ and exercises/; docs/design/layout.md),
but an install puts each inside agglab/ (`agglab.controller` is controller/), so site-packages
gains one name, `agglab`, and nothing another package could shadow. From a checkout the same
names resolve through agglab/__init__.py (its docstring says how and why).

Why a setup.py beside pyproject.toml: the mapping is static, but the subpackages are not (a new
folder under controller/ is a new package), and pyproject.toml's package finder cannot put a
prefix on what it finds. Everything else (metadata, dependencies, package data) stays in
pyproject.toml.
"""

from pathlib import Path

from setuptools import Extension, find_namespace_packages, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent
CODE = ("ground", "softswitch", "hosts", "pace", "controller", "emulation", "experiments")
# Data, installed as package data only (pyproject.toml [tool.setuptools.package-data]): their
# subfolders are not packages (exercises/1-aggregation-action is no Python name).
DATA = ("p4src", "exercises")


def subpackages(folder: str) -> list[str]:
    """Every package and namespace folder under `folder` (`trees` for controller/trees/), none of the caches."""
    return [name for name in find_namespace_packages(where=str(ROOT / folder), exclude=["*__pycache__*"])
            if all(part.isidentifier() for part in name.split("."))]


packages = ["agglab", *(f"agglab.{name}" for name in find_namespace_packages(where=str(ROOT / "agglab"),
                                                                              exclude=["*__pycache__*"]))]
for folder in CODE:
    packages += [f"agglab.{folder}", *(f"agglab.{folder}.{name}" for name in subpackages(folder))]
packages += [f"agglab.{folder}" for folder in DATA]



class OptionalBuildExt(build_ext):
    """The C fast paths (softswitch/fastdense.c, hosts/fastagent.c) are optional: without a
    compiler (or Python's headers, python3-dev) the install goes on without them and the switch
    and the agents run their Python reference paths (the switch says so in one line at start,
    softswitch/native.py; hosts/native.py `describe`)."""

    def run(self):
        try:
            super().run()
        except Exception as exc:                      # no compiler at all: CCompilerError, PlatformError
            print(f"agglab: the C fast path was not built ({exc}); the Python path will run")

    def build_extension(self, ext):
        try:
            super().build_extension(ext)
        except Exception as exc:
            print(f"agglab: {ext.name} was not built ({exc}); the Python path will run")


C_SHARED = {"include_dirs": ["ground"], "depends": ["ground/mmsg_calls.h"]}    # the mmsg calls both use
FAST = Extension("agglab.softswitch._fastdense", ["softswitch/fastdense.c"], extra_compile_args=["-O2"],
                 optional=True, **C_SHARED)
AGENT = Extension("agglab.hosts._fastagent", ["hosts/fastagent.c"], extra_compile_args=["-O2"], optional=True,
                  **C_SHARED)
setup(packages=packages, package_dir={"agglab": "agglab", **{f"agglab.{f}": f for f in CODE + DATA}},
      ext_modules=[FAST, AGENT], cmdclass={"build_ext": OptionalBuildExt})
