"""Exercises generated from the project's own code: `agglab exercise list|start|check|solution`.

Why generated: the solution of every exercise is the tested pipeline itself. Regions of the
real files are fenced by comment markers

    # EXERCISE <region> BEGIN hint: <one line>        (// in P4)
    ...the solution...
    # EXERCISE END

and an exercise's skeleton is the file with its regions' bodies replaced by a TODO naming the
region and its hint (Python also raises NotImplementedError there, so a missing part fails
loudly). The markers stay in the skeleton, so a student's regions can be spliced back into the
*current* repo file for checking: only the regions count, and the skeleton never rots.
An exercise is its folder, exercises/<N>-<slug>/: the text in README.md, what it is and its
checks in check.py beside it, discovered (agglab/exercise_folders.py); the checker that runs
them on a student's work is agglab/exercise_runner.py; the command line is
agglab/exercise_cmd.py, and a whole class is graded by agglab/exercise_grade.py.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from agglab.exercise_folders import Exercise, ExerciseError, exercises, get
from agglab.ground import lifeline
from agglab.ground.interrupts import deferred
from agglab.ground.paths import IMPORT_ROOT, REPO

# the exercises' API: the folders' (exercises, get) beside this module's checks
__all__ = ["Exercise", "ExerciseError", "build_overlay", "check", "default_dir", "exercises", "get", "regions",
           "runner_checks", "runner_command", "show", "start"]

_BEGIN = re.compile(r"^(?P<indent>[ \t]*)(?P<c>#|//) EXERCISE (?P<name>[\w-]+) BEGIN hint: (?P<hint>.*)$")
_END = re.compile(r"^[ \t]*(#|//) EXERCISE END$")
TODO = "TODO(exercise"
STOP_GRACE = 60.0      # seconds a stopped checker has to remove its switch and network (stop_checker)


# -- the generator -------------------------------------------------------------------------
@dataclass(frozen=True)
class Region:
    name: str
    hint: str
    indent: str
    comment: str
    body: str                       # the lines between the markers, newlines kept


def split(text: str, path: str = "") -> list:
    """The file as a list of plain text chunks and Regions, in order (joining gives it back)."""
    out: list = []
    lines = text.splitlines(keepends=True)
    i, plain = 0, []
    while i < len(lines):
        m = _BEGIN.match(lines[i].rstrip("\n"))
        if not m:
            if _END.match(lines[i].rstrip("\n")):
                raise ExerciseError(f"{path}:{i + 1}: EXERCISE END without BEGIN")
            plain.append(lines[i])
            i += 1
            continue
        plain.append(lines[i])
        j = i + 1
        while j < len(lines) and not _END.match(lines[j].rstrip("\n")):
            if _BEGIN.match(lines[j].rstrip("\n")):
                raise ExerciseError(f"{path}:{j + 1}: nested EXERCISE BEGIN")
            j += 1
        if j == len(lines):
            raise ExerciseError(f"{path}:{i + 1}: EXERCISE {m['name']} BEGIN without END")
        out.append("".join(plain))
        out.append(Region(m["name"], m["hint"], m["indent"], m["c"], "".join(lines[i + 1:j])))
        plain = [lines[j]]
        i = j + 1
    out.append("".join(plain))
    return out


def join(chunks: list) -> str:
    return "".join(c.body if isinstance(c, Region) else c for c in chunks)


def regions(text: str, path: str = "") -> dict[str, Region]:
    return {c.name: c for c in split(text, path) if isinstance(c, Region)}


def todo_body(region: Region, number: int) -> str:
    """What a skeleton holds in place of a region."""
    note = f"{TODO} {number}, {region.name}): {region.hint}"
    if region.comment == "#":
        return (f"{region.indent}# {note}\n"
                f"{region.indent}raise NotImplementedError({f'exercise {number}: write region {region.name}'!r})\n")
    return f"{region.indent}// {note}\n"


def skeleton(text: str, ex: Exercise, path: str = "") -> str:
    """`text` with the bodies of `ex`'s regions replaced by TODOs (other regions untouched)."""
    chunks = split(text, path)
    return join([Region(c.name, c.hint, c.indent, c.comment, todo_body(c, ex.number))
                 if isinstance(c, Region) and c.name in ex.regions else c for c in chunks])


def splice(base: str, student: str, names, path: str = "") -> str:
    """`base` with the bodies of regions `names` taken from `student` (the file a check runs)."""
    theirs = regions(student, path)
    missing = [n for n in names if n in regions(base, path) and n not in theirs]
    if missing:
        raise ExerciseError(f"{path}: the markers of region(s) {', '.join(missing)} are gone; keep the "
                            f"EXERCISE BEGIN/END lines (`agglab exercise start` again gives a fresh copy)")
    return join([theirs[c.name] if isinstance(c, Region) and c.name in names else c
                 for c in split(base, path)])


def repo_text(rel: str) -> str:
    return (REPO / rel).read_text()


# -- the commands --------------------------------------------------------------------------
def default_dir(ex: Exercise) -> Path:
    return Path.cwd() / f"agglab-exercise-{ex.number}"


def write_files(ex: Exercise, dest: Path, solution: bool) -> list[Path]:
    written = []
    dest.mkdir(parents=True, exist_ok=True)
    for rel in ex.files:
        text = repo_text(rel)
        out = dest / rel
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text if solution else skeleton(text, ex, rel))
        written.append(out)
    for name in ex.extra:
        src = ex.folder / (name if not solution else f"solution/{name}")
        out = dest / name
        out.write_text(src.read_text())
        written.append(out)
    readme = dest / "README.md"
    readme.write_text((ex.folder / "README.md").read_text())
    written.append(readme)
    return written


def start(ex: Exercise, dest: Path, solution: bool = False, force: bool = False) -> str:
    """Copy the skeleton (or the solution) into `dest`; the text to print."""
    if dest.exists() and any(dest.iterdir()) and not force and not solution:
        raise ExerciseError(f"{dest} is not empty: pick another --dir or remove it (your work would be lost)")
    files = write_files(ex, dest, solution)
    what = "solution" if solution else "skeleton"
    lines = [f"exercise {ex.number}: {ex.title} (about {ex.minutes} min)",
             f"{what} written to {dest}:"] + [f"  {f.relative_to(dest)}" for f in files]
    if not solution:
        lines += ["", f"read {dest / 'README.md'}, then fill in the regions marked {TODO} {ex.number}, ...)",
                  f"({', '.join(ex.regions) or 'answers.yaml'}); check with:",
                  f"  agglab exercise check {ex.number} --dir {dest}"]
    return "\n".join(lines)


def build_overlay(ex: Exercise, work: Path, overlay: Path) -> None:
    """The repo's current files with the student's regions spliced in, at repo-relative paths."""
    for rel in ex.files:
        student = work / rel
        if not student.exists():
            raise ExerciseError(f"{student} is missing: run `agglab exercise start {ex.number} --dir {work}`")
        out = overlay / rel
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(splice(repo_text(rel), student.read_text(), ex.regions, rel))


def runner_command(ex: Exercise, work: Path, overlay: Path, bmv2: str) -> tuple[list[str], dict]:
    """The checker's command line and environment (agglab.exercise_runner in a fresh interpreter)."""
    cmd = [sys.executable, "-m", "agglab.exercise_runner", str(ex.folder), "--overlay", str(overlay),
           "--work", str(work), "--bmv2", bmv2]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(IMPORT_ROOT), os.environ.get("PYTHONPATH")])))
    return cmd, env


def runner_checks(stdout: str, stderr: str) -> list[dict]:
    """The checks the runner printed (its last line), or one failed check quoting its crash."""
    try:
        return json.loads(stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return [{"name": "runs", "ok": False,
                 "detail": "the checker crashed:\n" + "\n".join(stderr.strip().splitlines()[-15:])}]


def check(ex: Exercise, work: Path, bmv2: str = "auto", timeout: float = 600) -> dict:
    """Grade `work`: run agglab.exercise_runner in a fresh interpreter with the student's code
    loaded in place of the project's modules (nothing in the repo changes)."""
    if not work.is_dir():
        raise ExerciseError(f"{work} does not exist: run `agglab exercise start {ex.number} --dir {work}` first")
    with tempfile.TemporaryDirectory(prefix="agglab-exercise-") as tmp:
        overlay = Path(tmp) / "overlay"
        overlay.mkdir()
        build_overlay(ex, work, overlay)
        cmd, env = runner_command(ex, work, overlay, bmv2)
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=IMPORT_ROOT,
                                env=env, preexec_fn=lifeline.preexec(bound_to_thread=True))   # this thread waits for it
        try:
            stdout, stderr = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            stop_checker(proc)
            return grade(ex, [{"name": "runs", "ok": False,
                               "detail": f"the checks did not finish in {timeout:.0f} s (an endless loop?)"}])
        except BaseException:           # Ctrl-C, SIGTERM, SIGHUP (ground/interrupts.py)
            stop_checker(proc)
            raise
    return grade(ex, runner_checks(stdout, stderr))


def stop_checker(proc: subprocess.Popen, grace: float = STOP_GRACE) -> None:
    """End the checker the way it cleans up: SIGTERM (the runner turns it into the exception that
    unwinds its BMv2 switch and its Mininet network, agglab/exercise_runner.py), SIGKILL only
    after `grace` seconds. Why not SIGKILL at once, as subprocess.run does on a timeout or a
    Ctrl-C: a checker killed in its BMv2 checks left its namespace and simple_switch behind.
    A second signal meanwhile waits (deferred) so that the checker's clean-up is not cut short."""
    with deferred():
        if proc.poll() is None:
            proc.terminate()
        try:
            proc.communicate(timeout=grace)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()


def grade(ex: Exercise, checks: list[dict]) -> dict:
    passed = sum(1 for c in checks if c["ok"] and not c.get("skipped"))
    skipped = sum(1 for c in checks if c.get("skipped"))
    ungraded = [c["name"] for c in checks if c.get("skipped")]
    return {"exercise": ex.number, "slug": ex.slug, "passed": passed, "skipped": skipped, "total": len(checks),
            "ok": bool(checks) and all(c["ok"] for c in checks), "complete": not ungraded,
            "ungraded": ungraded, "checks": checks}


def show(result: dict, verbose: bool = False) -> str:
    lines, hidden = [], False
    for c in result["checks"]:
        lines.append(f"{'SKIP' if c.get('skipped') else 'PASS' if c['ok'] else 'FAIL'}  {c['name']}")
        if c.get("detail") and not c["ok"]:
            lines += ["      " + line for line in c["detail"].splitlines()]
            if c.get("packets") and verbose:
                lines += ["      " + line for line in c["packets"].splitlines()]
            hidden = hidden or bool(c.get("packets"))
        elif c.get("skipped"):
            lines.append("      " + c["detail"])
        elif c.get("detail") and not c.get("skipped"):
            lines.append("      " + c["detail"].splitlines()[0])
    if hidden and not verbose:
        lines.append(f"(the packets sent, expected and got: agglab exercise check {result['exercise']} --verbose)")
    graded = result["total"] - result.get("skipped", 0)
    head = f"exercise {result['exercise']}: {result['passed']} of {graded} graded checks pass"
    if not result["ok"]:
        lines.append(f"{head}: not yet")
    elif result.get("skipped"):
        # never "all pass" about code that was not run: say what was left out, and why
        why = next(c["detail"] for c in result["checks"] if c.get("skipped")).split(" (still TODO)")[0]
        lines.append(f"{head}; {result['skipped']} NOT graded here ({why}): the graded part passes, "
                     "the SKIP lines above are unchecked")
    else:
        lines.append(f"{head}: all checks pass")
    return "\n".join(lines)
