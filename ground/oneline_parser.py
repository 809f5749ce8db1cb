"""An argparse parser whose refusals are one line on stderr and exit code 2.

Why: argparse's own `error()` prints the whole usage block (a dozen lines for `agglab
allreduce`) before the message; the project's rule for bad input is one clear line and exit
2. Subparsers made with `add_subparsers()` take their parent's class, so giving the top
parser this class makes every subcommand refuse the same way. Here in ground/ because both
programs use it: `agglab` (agglab/cli.py) and `python -m agglab.experiments`.
"""

from __future__ import annotations

import argparse
import sys


class OneLineParser(argparse.ArgumentParser):
    """`PROG: MESSAGE (see PROG --help)` on stderr, exit 2."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: {message.splitlines()[0] if message else 'bad arguments'} "
                     f"(see {self.prog} --help)\n")

    def exit(self, status: int = 0, message: str | None = None):
        if message:
            sys.stderr.write(message)
        raise SystemExit(status)
