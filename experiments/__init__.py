"""Paper trends on the emulator: definitions, runner, report and plots.

Why a package of its own: the experiments only *drive* the emulator through one function,
`agglab.emulation.session.run_allreduce`, so they can be tested without Mininet by injecting a
fake, and the emulator can change underneath without touching how results are collected,
judged against the papers and reported.

Run it as `python -m agglab.experiments [default|quick|FILE.yaml]` or `agglab experiment FILE.yaml`.
"""

from agglab.experiments.definition import ConfigError, Definition, Point
from agglab.experiments.definition_file import load_definition

__all__ = ["ConfigError", "Definition", "Point", "load_definition"]
