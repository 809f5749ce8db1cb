"""The command line of `agglab exercise list|start|check|solution|grade`.

Why a module of its own: the command dispatches to the exercise generator and checker
(agglab/exercise.py) and to the class grader (agglab/exercise_grade.py), which itself builds
on the checker; the parser living in either would make the two import each other.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from agglab.exercise import check, default_dir, show, start
from agglab.exercise_folders import ExerciseError, exercises, get
from agglab.exercise_grade import DEFAULT_TIMEOUT, grade_command

EXAMPLES = """examples:
  agglab exercise list
  agglab exercise start 1 --dir ~/ex1          # the skeleton to fill in
  agglab exercise check 1 --dir ~/ex1          # grade one student's folder
  agglab exercise grade 1 submissions/ --out grades.csv --timeout 120 --bmv2 no
                                               # a whole class: one folder per student
"""


def main(args) -> int:
    """Entry point of `agglab exercise` (agglab/cli.py)."""
    try:
        if args.action == "list":
            for ex in exercises():
                kind = "P4 + Python" if ex.p4 else ("Python" if ex.files else "lab + answers")
                print(f"{ex.number}  {ex.title}  [{kind}, ~{ex.minutes} min]")
            return 0
        if args.number is None:
            raise ExerciseError(f"agglab exercise {args.action} needs an exercise number (see `agglab exercise list`)")
        if args.action == "grade":
            return grade_command(args)
        if args.submissions is not None:
            raise ExerciseError(f"agglab exercise {args.action} takes one folder, as --dir "
                                f"(a folder of submissions is for `agglab exercise grade`)")
        ex = get(args.number)
        dest = Path(args.dir).resolve() if args.dir else default_dir(ex)
        if args.action in ("start", "solution"):
            print(start(ex, dest, solution=args.action == "solution"))
            return 0
        result = check(ex, dest, bmv2=args.bmv2)
    except ExerciseError as exc:
        print(f"agglab exercise: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:                  # --dir names no folder we may write or read
        print(f"agglab exercise: {exc.filename or args.dir}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    print(json.dumps(result, sort_keys=True) if args.json else show(result, verbose=args.verbose))
    return 0 if result["ok"] else 1


def add_parser(sub) -> None:
    e = sub.add_parser("exercise", help="exercises: list, start, check, solution, grade a class",
                       epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    e.add_argument("action", choices=["list", "start", "check", "solution", "grade"])
    e.add_argument("number", type=int, nargs="?", help="exercise number (see `agglab exercise list`)")
    e.add_argument("submissions", nargs="?", default=None,
                   help="grade: the folder holding one subfolder per student (each as `start` made it)")
    e.add_argument("--dir", default=None, help="work folder (default ./agglab-exercise-N)")
    e.add_argument("--json", action="store_true", help="check: print one grade object (for autograders)")
    e.add_argument("--verbose", "-v", action="store_true",
                   help="check: also print the packets sent, expected and got of a failing vector")
    e.add_argument("--bmv2", choices=["auto", "yes", "no"], default="auto",
                   help="check P4 exercises on BMv2: auto = when simple_switch, p4c and root are there "
                        "(grade: `no` grades the Python part without root)")
    e.add_argument("--out", default="grades.csv", help="grade: the CSV written, one row per student "
                                                       "(default grades.csv)")
    e.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT,
                   help=f"grade: seconds one student's checks may take before they are killed "
                        f"(default {DEFAULT_TIMEOUT:g})")
    e.set_defaults(func=main)
