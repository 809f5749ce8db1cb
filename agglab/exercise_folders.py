"""The exercises are folders, discovered by name: exercises/<N>-<slug>/ with its README.md.

An exercise is its folder and nothing else names it: README.md is the text a student gets,
check.py beside it says what the exercise is and grades it (the answer templates of a lab
exercise sit there too). Adding an exercise is adding a folder; `agglab exercise list`,
`start`, `check` and `solution` find it. check.py defines

    TITLE      the line `agglab exercise list` prints
    MINUTES    about how long it takes
    FILES      repo-relative files holding the exercise's regions (() for a lab with answers)
    REGIONS    the region names the student writes
    checks(work: Path) -> list[dict]    the exercise's own checks (agglab/exercise_kit.py)

and, where they apply,

    EXTRA      files copied from the folder into the work folder (the solution's from solution/)
    VECTORS    the conformance vectors covering the regions: on the software switch, and on
               BMv2 for P4 regions
    BMV2_RUN   the RunSpec fields of the allreduce in Mininet through the student's P4 (a P4
               exercise needs it)

The checker (agglab/exercise_runner.py) runs, in order: the regions are written, VECTORS on the
software switch, checks(work), then VECTORS and BMV2_RUN on BMv2.

Why check.py is loaded from its path and not imported: the folders' names (1-aggregation-action)
are what the docs and a student's commands call the exercises, not Python identifiers; and
the checks are a plug-in of the program: they import agglab's kit, agglab never imports them by
name (tests/test_layers.py puts exercises/ at layer 5, above agglab).
"""

from __future__ import annotations

import functools
import importlib.util
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from agglab.ground.paths import EXERCISES as EXERCISE_DIR

_FOLDER = re.compile(r"^(?P<number>[0-9]+)-(?P<slug>[a-z0-9][a-z0-9-]*)$")
REQUIRED = ("TITLE", "MINUTES", "FILES", "REGIONS", "checks")


class ExerciseError(ValueError):
    """Bad exercise number, missing work folder, broken markers, malformed exercise folder:
    one line for the user."""


@dataclass(frozen=True)
class Exercise:
    number: int
    slug: str
    title: str
    minutes: int
    files: tuple[str, ...]          # repo-relative files holding this exercise's regions
    regions: tuple[str, ...]        # region names the student writes
    folder: Path                    # exercises/<N>-<slug>/: README.md, check.py, answer templates
    extra: tuple[str, ...] = ()     # files copied from the folder (answer templates)
    vectors: tuple[str, ...] = ()   # conformance vectors covering the regions
    bmv2_run: dict | None = field(default=None, compare=False)     # RunSpec fields on BMv2
    checks: Callable[[Path], list] | None = field(default=None, compare=False, repr=False)

    @property
    def p4(self) -> bool:
        return any(f.endswith(".p4") for f in self.files)


def discover(root: Path = EXERCISE_DIR) -> dict[int, Path]:
    """number -> folder of every exercise under `root`: each folder with a README.md or a
    check.py (a folder with neither, such as __pycache__, is not an exercise). A folder with
    one but not the other, or not named <number>-<slug>, or a number taken twice, is an error
    naming it: an exercise half added is never silently left out."""
    found: dict[int, Path] = {}
    for folder in sorted(p for p in root.iterdir() if p.is_dir()):
        readme, check = (folder / "README.md").is_file(), (folder / "check.py").is_file()
        if not (readme or check):
            continue
        m = _FOLDER.match(folder.name)
        if not m:
            raise ExerciseError(f"{folder}: an exercise folder is named <number>-<slug>, "
                                f"e.g. 1-aggregation-action")
        if not check:
            raise ExerciseError(f"{folder} has a README.md but no check.py: an exercise's checks "
                                f"live beside its README (agglab/exercise_folders.py says what it defines)")
        if not readme:
            raise ExerciseError(f"{folder} has a check.py but no README.md (the text a student gets)")
        number = int(m["number"])
        if number in found:
            raise ExerciseError(f"exercise {number} twice: {found[number].name} and {folder.name}")
        found[number] = folder
    return dict(sorted(found.items()))


@functools.cache
def load(folder: Path) -> Exercise:
    """The exercise in `folder`, from its check.py (run once per folder and process)."""
    path = folder / "check.py"
    m = _FOLDER.match(folder.name)
    if not m or not path.is_file():
        raise ExerciseError(f"{folder} is not an exercise folder (<number>-<slug>/ with a check.py)")
    spec = importlib.util.spec_from_file_location(f"exercise_{m['number']}_check", path)
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        raise ExerciseError(f"{path} does not load: {type(exc).__name__}: {exc}") from exc
    missing = [name for name in REQUIRED if not hasattr(module, name)]
    if missing:
        raise ExerciseError(f"{path} defines no {', '.join(missing)} (a check.py defines "
                            f"{', '.join(REQUIRED[:-1])} and checks(work))")
    if not callable(module.checks):
        raise ExerciseError(f"{path}: checks must be a function checks(work) -> list of checks")
    ex = Exercise(int(m["number"]), m["slug"], module.TITLE, module.MINUTES, tuple(module.FILES),
                  tuple(module.REGIONS), folder, tuple(getattr(module, "EXTRA", ())),
                  tuple(getattr(module, "VECTORS", ())), getattr(module, "BMV2_RUN", None), module.checks)
    if ex.p4 and not (ex.vectors and ex.bmv2_run):
        raise ExerciseError(f"{path}: a P4 exercise defines VECTORS and BMV2_RUN (its checks on BMv2)")
    return ex


def exercises(root: Path = EXERCISE_DIR) -> tuple[Exercise, ...]:
    """Every exercise under `root`, by number. Called, not computed at import: the CLI imports
    agglab.exercise for its parser, and only `agglab exercise` needs the check modules."""
    return tuple(load(folder) for folder in discover(root).values())


def get(number: int, root: Path = EXERCISE_DIR) -> Exercise:
    """One exercise: only its own check.py is loaded."""
    folders = discover(root)
    if number not in folders:
        raise ExerciseError(f"no exercise {number}; `agglab exercise list` shows "
                            f"{min(folders, default=0)}..{max(folders, default=0)}")
    return load(folders[number])
