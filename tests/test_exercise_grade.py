"""Grading a class (agglab/exercise_grade.py): `agglab exercise grade N SUBMISSIONS_DIR`.

Why these: the table is what an instructor trusts with marks, so a class of planted
submissions (the solution, the untouched skeleton, three single mistakes of the kind the
exercise tests plant in tests/test_exercises.py) must give exactly the table written out here
by hand; and a student whose code hangs or crashes must cost only their own row.
"""

from __future__ import annotations

import csv
import os

import pytest

from agglab import exercise
from agglab.cli import main
from agglab.exercise_grade import grade_class

AGG = "softswitch/aggregate.py"
MISTAKES = {        # student folder -> (old, new) in softswitch/aggregate.py, one mistake each
    # tests/test_exercises.py: a wrong addition (overwrites) and the forgotten sparse re-arm
    "carol-overwrites": ("np.add(lanes, pkt, out=lanes)", "lanes[:] = pkt"),
    "dave-no-rearm": ("            if self.on_complete is not None:\n"
                      "                self.on_complete(r, o, flags)\n", ""),
    # and the exponent of the last contribution kept instead of the largest
    "erin-last-exponent": ("e = max(self.exp.item(r), pexp)", "e = pexp"),
}

CHECKS = ["region aggregate-add in softswitch/aggregate.py written",
          "region aggregate-duplicate in softswitch/aggregate.py written",
          "region aggregate-add in p4src/include/aggregate.p4 written",
          "region aggregate-duplicate in p4src/include/aggregate.p4 written",
          "conformance first_contribution (software switch)",
          "conformance accumulation (software switch)",
          "conformance max_exponent (software switch)",
          "conformance completion_multicast (software switch)",
          "conformance duplicate_before_completion (software switch)",
          "conformance duplicate_after_completion (software switch)",
          "conformance tree_inner_switch (software switch)",
          "conformance sparse_rearm (software switch)",
          "allreduce 4 workers (software switch)"]

P, F, S = "PASS", "FAIL", "SKIP"
EXPECTED = {        # student -> the cells of CHECKS, then passed, graded, status (by hand)
    "alice-solution": ([P, P, S, S, P, P, P, P, P, P, P, P, P], 11, 11, "all pass"),
    "bob-skeleton": ([F, F, S, S, F, F, F, F, F, F, F, F, F], 0, 11, "not yet"),
    "carol-overwrites": ([P, P, S, S, P, F, P, F, P, F, F, P, F], 6, 11, "not yet"),
    "dave-no-rearm": ([P, P, S, S, P, P, P, P, P, P, P, F, P], 10, 11, "not yet"),
    # the vectors whose contributions carry different exponents: the agg_exp register and the
    # exponent multicast in the result differ
    "erin-last-exponent": ([P, P, S, S, P, F, F, F, P, P, P, P, P], 8, 11, "not yet"),
}


def plant(root, name, old=None, new=None, solution=True):
    ex = exercise.get(1)
    exercise.start(ex, root / name, solution=solution)
    if old is not None:
        path = root / name / AGG
        assert old in path.read_text(), name
        path.write_text(path.read_text().replace(old, new, 1))


def test_a_class_of_planted_submissions_gives_the_expected_table(tmp_path, capsys):
    root = tmp_path / "submissions"
    plant(root, "alice-solution")
    plant(root, "bob-skeleton", solution=False)
    for name, (old, new) in MISTAKES.items():
        plant(root, name, old, new)
    out = tmp_path / "grades.csv"
    assert main(["exercise", "grade", "1", str(root), "--out", str(out), "--bmv2", "no"]) == 0
    with out.open(newline="") as f:
        table = list(csv.DictReader(f))
    assert [r["student"] for r in table] == sorted(EXPECTED)
    assert list(table[0])[1:len(CHECKS) + 1] == CHECKS
    for r in table:
        cells, passed, graded, status = EXPECTED[r["student"]]
        assert [r[c] for c in CHECKS] == cells, r
        assert (int(r["passed"]), int(r["graded"]), r["status"]) == (passed, graded, status), r
        assert float(r["seconds"]) > 0
    # the first failure names the first failing check and its first line
    carol = next(r for r in table if r["student"] == "carol-overwrites")
    assert carol["first failure"].startswith("conformance accumulation (software switch): accumulation: registers")
    stdout, stderr = capsys.readouterr()
    assert "[5/5] erin-last-exponent: 8 of 11 graded checks pass, not yet" in stderr
    assert "      2/5  conformance accumulation (software switch)" in stdout.splitlines()
    assert "      3/5  conformance max_exponent (software switch)" in stdout.splitlines()
    assert "      -  region aggregate-add in p4src/include/aggregate.p4 written: SKIP, P4 not graded here: --bmv2 no" in stdout
    assert "1 of 5 students pass every graded check; 0 timed out, 0 could not be checked" in stdout


def test_a_hung_or_crashing_student_costs_only_their_row(tmp_path):
    """A region that never returns is killed at the time limit; one that kills its own process
    is recorded as a crash; the student after them is graded as usual."""
    root = tmp_path / "submissions"
    hang = "            while True:\n                pass\n"
    crash = "            import os\n            os._exit(3)\n"
    first = "            lanes = self.values[lo:lo + K]\n"
    plant(root, "a-hangs", first, hang + first)
    plant(root, "b-crashes", first, crash + first)
    plant(root, "c-no-folder-content", solution=False)
    for path in (root / "c-no-folder-content").rglob("*.py"):
        path.unlink()
    rows, _ = grade_class(exercise.get(1), root, bmv2="no", timeout=20)
    status = {r.student: r.status for r in rows}
    assert status["a-hangs"] == "timed out after 20 s (killed)"
    assert status["b-crashes"].startswith("checker crashed (exit 3)")
    assert status["c-no-folder-content"].startswith(f"not gradable: {root / 'c-no-folder-content' / AGG} is missing")
    hung = rows[0]
    assert hung.checks == [] and hung.pid is not None
    with pytest.raises(ProcessLookupError, match="No such process"):     # killed and reaped, not left spinning
        os.kill(hung.pid, 0)


@pytest.mark.root
def test_student_code_runs_without_root(tmp_path):
    """As root, a Python-only grade runs the student's code as `nobody`: a region that refuses
    to run as root passes."""
    root = tmp_path / "submissions"
    first = "            lanes = self.values[lo:lo + K]\n"
    plant(root, "rootless", first, "            assert __import__('os').geteuid() != 0, 'ran as root'\n" + first)
    rows, unprivileged = grade_class(exercise.get(1), root, bmv2="no", timeout=120)
    assert unprivileged and rows[0].status == "all pass", rows[0]
