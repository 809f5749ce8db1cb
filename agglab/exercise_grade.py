"""Grading a class: `agglab exercise grade N SUBMISSIONS_DIR --out grades.csv`.

SUBMISSIONS_DIR holds one folder per student, each as `agglab exercise start N` made it. Every
student's work goes through the same checker as `agglab exercise check` (agglab/exercise.py,
agglab/exercise_runner.py), and the class becomes one CSV row per student: each check's
PASS/FAIL/SKIP (`-` where it did not run), how many passed of how many graded, the seconds,
the status and the first failure's first line; one summary line per check says how many
students passed it.

Why each student in a process of their own, in a session of their own, with a time limit:
student code loops and crashes, and one student must never cost the others their grade; on
the limit the whole process group is killed (SIGKILL) and the row says "timed out". Why as
`nobody` when we are root: student code has no business with root, and only the BMv2 checks
need it (a network namespace); each student's folder is copied into a private temporary
folder that user owns, so no student reads or changes another's work. If the repo cannot be
read by `nobody` (a checkout under /root) the checks run as root and the summary says so.
"""

from __future__ import annotations

import csv
import os
import pwd
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from agglab.exercise import build_overlay, runner_checks, runner_command
from agglab.exercise_folders import Exercise, ExerciseError, get
from agglab.ground import lifeline
from agglab.ground.paths import IMPORT_ROOT

DEFAULT_TIMEOUT = 300.0         # seconds per student: the software checks take seconds, BMv2's minutes
NOT_RUN = "-"


@dataclass
class Row:
    """One student's grade."""
    student: str
    checks: list[dict] = field(default_factory=list)     # as the runner printed them
    seconds: float = 0.0
    status: str = ""
    pid: int | None = None                                # the checker's process (gone when the row is made)

    def cell(self, name: str) -> str:
        c = next((c for c in self.checks if c["name"] == name), None)
        if c is None:
            return NOT_RUN
        return "SKIP" if c.get("skipped") else "PASS" if c["ok"] else "FAIL"

    @property
    def passed(self) -> int:
        return sum(1 for c in self.checks if c["ok"] and not c.get("skipped"))

    @property
    def graded(self) -> int:
        return sum(1 for c in self.checks if not c.get("skipped"))

    @property
    def first_failure(self) -> str:
        bad = next((c for c in self.checks if not c["ok"]), None)
        if bad is None:
            return ""
        first = (bad.get("detail") or "").strip().splitlines()[:1]
        return ": ".join([bad["name"], *first])


def submissions(root: Path) -> list[Path]:
    """The students' folders, by name; one clear error when there are none."""
    if not root.is_dir():
        raise ExerciseError(f"{root} is not a folder of submissions (one subfolder per student)")
    found = sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))
    if not found:
        raise ExerciseError(f"{root} holds no student folders (one subfolder per student, "
                            f"each as `agglab exercise start` made it)")
    return found


def grading_user(ex: Exercise, bmv2: str) -> tuple[int, int] | None:
    """(uid, gid) to run the checks as, or None to keep ours: not root already, BMv2 checks
    that may need root, or no `nobody` on this machine."""
    if os.geteuid() != 0 or (ex.p4 and bmv2 != "no"):
        return None
    try:
        nobody = pwd.getpwnam("nobody")
    except KeyError:
        return None
    return nobody.pw_uid, nobody.pw_gid


def _child(user: tuple[int, int] | None, parent: int):
    """preexec_fn: drop to `user`, then die with the grader (the death signal is cleared by a
    change of user, so it is set after)."""
    def run() -> None:
        if user is not None:
            os.setgroups([])
            os.setgid(user[1])
            os.setuid(user[0])
        lifeline.die_with_parent(parent)
    return run


def _give(tree: Path, user: tuple[int, int] | None) -> None:
    if user is None:
        return
    for path in [tree, *tree.rglob("*")]:
        os.chown(path, *user, follow_symlinks=False)


def user_can_run(user: tuple[int, int] | None) -> bool:
    """Whether `user` can import the checker at all (the repo and the venv readable by it)."""
    if user is None:
        return True
    cmd = [sys.executable, "-c", "import agglab.exercise_runner"]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(IMPORT_ROOT), os.environ.get("PYTHONPATH")])))
    with tempfile.TemporaryDirectory(prefix="agglab-grade-") as tmp:
        _give(Path(tmp), user)
        try:
            return subprocess.run(cmd, cwd=tmp, env=dict(env, HOME=tmp), capture_output=True, timeout=120,
                                  preexec_fn=_child(user, os.getpid())).returncode == 0
        except (OSError, subprocess.SubprocessError):
            return False


def grade_one(ex: Exercise, work: Path, bmv2: str, timeout: float, user: tuple[int, int] | None) -> Row:
    """One student's checks in a fresh process group, killed at `timeout`."""
    row = Row(work.name)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="agglab-grade-") as tmp:
        copy, overlay = Path(tmp) / "work", Path(tmp) / "overlay"
        try:
            shutil.copytree(work, copy, symlinks=True)
            overlay.mkdir()
            build_overlay(ex, copy, overlay)
        except (ExerciseError, OSError) as exc:
            row.status = f"not gradable: {str(exc).replace(str(copy), str(work))}"
            return row
        _give(Path(tmp), user)
        cmd, env = runner_command(ex, copy, overlay, bmv2)
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=IMPORT_ROOT,
                                env=dict(env, HOME=tmp), start_new_session=True,
                                preexec_fn=_child(user, os.getpid()))
        row.pid = proc.pid
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)         # its own session: the checker and all it started
            proc.communicate()
            row.seconds = time.monotonic() - started
            row.status = f"timed out after {timeout:g} s (killed)"
            return row
        finally:
            if proc.poll() is None:                     # Ctrl-C while waiting: leave nothing behind
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    row.seconds = time.monotonic() - started
    checks = runner_checks(out, err)
    if proc.returncode != 0 or checks and checks[0]["name"] == "runs" and not checks[0]["ok"]:
        last = (err.strip().splitlines() or ["no message"])[-1]
        row.status = f"checker crashed (exit {proc.returncode}): {last}"
        return row
    row.checks = checks
    row.status = "all pass" if all(c["ok"] for c in checks) else "not yet"
    return row


def columns(rows: list[Row]) -> list[str]:
    """Every check any student ran, in the order the checker runs them."""
    names: list[str] = []
    for row in rows:
        for c in row.checks:
            if c["name"] not in names:
                names.append(c["name"])
    return names


def write_csv(rows: list[Row], out) -> None:
    names = columns(rows)
    w = csv.writer(out)
    w.writerow(["student", *names, "passed", "graded", "seconds", "status", "first failure"])
    for r in rows:
        w.writerow([r.student, *(r.cell(n) for n in names), r.passed, r.graded, f"{r.seconds:.1f}", r.status,
                    r.first_failure])


def summary(ex: Exercise, rows: list[Row]) -> list[str]:
    """One line per check: how many students passed it; then the class in one line."""
    lines = [f"exercise {ex.number}: how many of the {len(rows)} students pass each check"]
    for name in columns(rows):
        cells = [r.cell(name) for r in rows]
        if all(c in ("SKIP", NOT_RUN) for c in cells):
            why = next((c.get("detail", "") for r in rows for c in r.checks if c["name"] == name), "")
            lines.append(f"  {'-':>7}  {name}: SKIP, {why.split(' (still TODO)')[0] or 'not graded here'}")
        else:
            lines.append(f"  {str(cells.count('PASS')) + '/' + str(len(rows)):>7}  {name}")
    complete = sum(1 for r in rows if r.status == "all pass")
    timed_out = sum(1 for r in rows if r.status.startswith("timed out"))
    crashed = sum(1 for r in rows if r.status.startswith(("checker crashed", "not gradable")))
    lines.append(f"{complete} of {len(rows)} students pass every graded check; "
                 f"{timed_out} timed out, {crashed} could not be checked")
    return lines


def grade_class(ex: Exercise, root: Path, bmv2: str = "auto", timeout: float = DEFAULT_TIMEOUT,
                progress=None) -> tuple[list[Row], bool]:
    """(a Row per student folder under `root`, whether the checks ran without root)."""
    folders = submissions(root)
    user = grading_user(ex, bmv2)
    if not user_can_run(user):
        user = None
    rows = []
    for i, work in enumerate(folders, start=1):
        row = grade_one(ex, work, bmv2, timeout, user)
        rows.append(row)
        if progress is not None:
            counts = f"{row.passed} of {row.graded} graded checks pass, " if row.checks else ""
            progress(f"[{i}/{len(folders)}] {row.student}: {counts}{row.status} ({row.seconds:.1f} s)")
    return rows, user is not None or os.geteuid() != 0


def grade_command(args) -> int:
    """`agglab exercise grade N SUBMISSIONS_DIR --out FILE` (agglab/exercise_cmd.py)."""
    ex = get(args.number)
    if args.submissions is None:
        raise ExerciseError("agglab exercise grade needs the folder of submissions: "
                            "agglab exercise grade N SUBMISSIONS_DIR --out grades.csv")
    if args.timeout <= 0:
        raise ExerciseError(f"--timeout must be a positive number of seconds, not {args.timeout:g}")
    root = Path(args.submissions)
    submissions(root)                                   # bad input fails before the CSV is touched
    try:
        out = open(args.out, "w", newline="")
    except OSError as exc:
        raise ExerciseError(f"cannot write {args.out}: {exc.strerror or exc}") from exc
    with out:
        rows, unprivileged = grade_class(ex, root, args.bmv2, args.timeout,
                                         progress=lambda line: print(line, file=sys.stderr, flush=True))
        write_csv(rows, out)
    for line in summary(ex, rows):
        print(line)
    if not unprivileged:
        print("note: the checks ran as root (BMv2 checks need it, or `nobody` cannot read the repo)")
    print(f"one row per student: {args.out}")
    return 0
