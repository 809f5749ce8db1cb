"""An exercise is a folder: exercises/<N>-<slug>/ with its README.md and check.py is listed,
started and checked with no other file edited (agglab/exercise_folders.py discovers it), and
a folder half added is an error naming it, never an exercise silently left out."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from agglab.exercise_folders import ExerciseError, discover, exercises, get, load
from agglab.ground.paths import EXERCISES, REPO

PACKAGES = ("agglab", "controller", "emulation", "experiments", "ground", "hosts", "pace", "softswitch", "p4src",
            "exercises")

SCRATCH_CHECK = '''

_rerun = checks


def checks(work):
    import pathlib

    return _rerun(work) + [result("the scratch copy's own check", True, pathlib.Path(__file__).parent.name)]
'''

PROBE = r"""
import sys
from agglab.cli import main
from agglab.ground.paths import REPO

print("from", REPO)
for argv in (["exercise", "list"], ["exercise", "solution", "9", "--dir", sys.argv[1]],
             ["exercise", "check", "9", "--dir", sys.argv[1], "--bmv2", "no"]):
    print("exit", main(argv), flush=True)
"""


def test_the_checkout_discovers_every_exercise_folder():
    on_disk = {p.parent for p in EXERCISES.glob("*/README.md")}
    found = exercises()
    assert {ex.folder for ex in found} == on_disk
    assert [ex.number for ex in found] == [1, 2, 3, 4, 5, 6, 7]
    assert [ex.slug for ex in found] == ["aggregation-action", "loss-recovery", "block-sparse",
                                        "rack-aware-trees", "link-failures", "reroute-carry", "atp-pool"]
    assert all(callable(ex.checks) for ex in found)
    assert get(4).files == ("controller/trees/rat.py",) and get(5).extra == ("answers.yaml",)
    for ex in found:          # the list's minutes are the README's
        assert f"about {ex.minutes} minutes" in (ex.folder / "README.md").read_text().splitlines()[0], ex.slug


def test_a_copied_exercise_folder_is_listed_started_and_checked(tmp_path: Path):
    """Exercise 5 copied as 9-scratch-copy, with one check of its own added, in a scratch copy
    of the project: `agglab exercise list`, `solution 9` and `check 9` find it and run its checks."""
    for name in PACKAGES:
        shutil.copytree(REPO / name, tmp_path / name, ignore=shutil.ignore_patterns("__pycache__"))
    scratch = tmp_path / "exercises" / "9-scratch-copy"
    shutil.copytree(tmp_path / "exercises" / "5-link-failures", scratch)
    check = scratch / "check.py"
    text = check.read_text()
    assert text.count('TITLE = "') == 1
    check.write_text(text.replace('TITLE = "', 'TITLE = "Scratch: ', 1) + SCRATCH_CHECK)
    work = tmp_path / "w"
    out = subprocess.run([sys.executable, "-c", PROBE, str(work)], cwd=tmp_path, capture_output=True, text=True,
                         env={"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"}, timeout=240)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == f"from {tmp_path}"                   # the scratch copy ran, not the checkout
    assert [line for line in lines if line.startswith("exit")] == ["exit 0", "exit 0", "exit 0"], out.stdout
    assert "9  Scratch: Link failures: find the active tree, cut it, explain the epoch change  " \
           "[lab + answers, ~45 min]" in lines
    assert (work / "answers.yaml").read_text() == (scratch / "solution" / "answers.yaml").read_text()
    for name in ("epoch_before", "roots_after", "why_epoch explained", "the scratch copy's own check"):
        assert f"PASS  {name}" in lines, out.stdout
    assert lines[lines.index("PASS  the scratch copy's own check") + 1] == "      9-scratch-copy"
    assert lines[-2] == "exercise 9: 8 of 8 graded checks pass: all checks pass", out.stdout
    assert 9 not in discover()                                   # the checkout itself is untouched


def exercise_folder(root: Path, name: str, check: str | None = None, readme: bool = True) -> Path:
    folder = root / name
    folder.mkdir(parents=True)
    if readme:
        (folder / "README.md").write_text(f"# {name}\n")
    if check is not None:
        (folder / "check.py").write_text(check)
    return folder


GOOD = 'TITLE = "t"\nMINUTES = 5\nFILES = ()\nREGIONS = ()\n\n\ndef checks(work):\n    return []\n'


def test_a_good_scratch_folder_loads(tmp_path):
    folder = exercise_folder(tmp_path, "7-tiny", GOOD)
    (tmp_path / "__pycache__").mkdir()                      # neither README nor check.py: not an exercise
    assert discover(tmp_path) == {7: folder}
    ex = get(7, tmp_path)
    assert (ex.number, ex.slug, ex.title, ex.minutes, ex.folder, ex.p4) == (7, "tiny", "t", 5, folder, False)
    assert ex.checks(tmp_path) == []
    with pytest.raises(ExerciseError, match=r"no exercise 8; `agglab exercise list` shows 7\.\.7"):
        get(8, tmp_path)


@pytest.mark.parametrize("case, error", [
    ("no check.py", r"3-half has a README.md but no check.py"),
    ("no README", r"3-half has a check.py but no README.md"),
    ("bad name", r"half: an exercise folder is named <number>-<slug>"),
    ("twice", r"exercise 3 twice: 3-half and 3-other"),
    ("no checks", r"check.py defines no MINUTES, checks"),
    ("checks not a function", r"check.py: checks must be a function"),
    ("does not load", r"check.py does not load: ZeroDivisionError"),
    ("P4 without BMv2 checks", r"check.py: a P4 exercise defines VECTORS and BMV2_RUN"),
])
def test_a_malformed_folder_is_an_error_naming_it(tmp_path, case, error):
    if case == "no check.py":
        exercise_folder(tmp_path, "3-half")
    elif case == "no README":
        exercise_folder(tmp_path, "3-half", GOOD, readme=False)
    elif case == "bad name":
        exercise_folder(tmp_path, "half", GOOD)
    elif case == "twice":
        exercise_folder(tmp_path, "3-half", GOOD)
        exercise_folder(tmp_path, "3-other", GOOD)
    elif case == "no checks":
        exercise_folder(tmp_path, "3-half", 'TITLE = "t"\nFILES = ()\nREGIONS = ()\n')
    elif case == "checks not a function":
        exercise_folder(tmp_path, "3-half", GOOD.replace("def checks(work):\n    return []\n", "checks = 1\n"))
    elif case == "does not load":
        exercise_folder(tmp_path, "3-half", GOOD + "1 / 0\n")
    else:
        exercise_folder(tmp_path, "3-half", GOOD.replace("FILES = ()", 'FILES = ("p4src/include/x.p4",)'))
    with pytest.raises(ExerciseError, match=error):
        exercises(tmp_path)


def test_load_refuses_a_folder_that_is_not_an_exercise(tmp_path):
    with pytest.raises(ExerciseError, match="is not an exercise folder"):
        load(exercise_folder(tmp_path, "3-half"))
