"""agglab: packet-level emulator for in-network aggregation (SwitchML/OmniReduce style).

This package is the program (layer 4): the command-line interface, the lab, the teaching
exercises, calibration and benchmarks. It is also the project's one namespace: the shared
pieces it builds on are imported as its subpackages, `agglab.ground` (wire format, paths),
`agglab.softswitch` (the switches), `agglab.hosts` (the hosts' agents), `agglab.pace`,
`agglab.controller`, `agglab.emulation`, `agglab.experiments`, with `agglab.p4src` and
`agglab.exercises` as data, although each keeps its own top-level folder in the repository.

Why one namespace: `pip install .` used to put ten top-level packages into site-packages,
generic names (`controller`, `hosts`, `ground`) that another installed package can shadow or be
shadowed by. Installed, the folders sit inside this package (setup.py maps `agglab.controller`
to controller/, and so on), so top_level.txt lists `agglab` alone.

How `agglab.controller` finds controller/ in the repository: below, this package's `__path__`
gets the repository's root as a second entry when the sibling folders are there and not inside
this folder, so Python's own path finder resolves `agglab.controller` to <root>/controller. That
one rule serves every way the code runs from a checkout: tests and `python -m agglab...` with
the root on sys.path, processes started with PYTHONPATH=<root> (the switches, workers and
daemons in Mininet, under the venv's or /usr/bin's python3), scratch copies of the tree that
tests make (their own root, never the checkout's), and the editable install (`make setup`),
whose finder only has to find `agglab` itself. Why not rely on setuptools' editable finder
alone: it exists only in the venv it was installed into, and it maps to the checkout it was
installed from, so a process started with another interpreter (no finder) or a scratch copy
(the finder would answer with the checkout's files) would break or, worse, silently run other
code. Installed (not editable), the folders are inside this package, the test below is false,
and nothing is added: `__path__` stays site-packages/agglab alone, so a stray top-level
`controller` in site-packages is never seen. The extra entry also makes the root's other folders
(tests/, scripts/) reachable as `agglab.tests`...; nothing imports them that way
(tests/test_layers.py checks that every project import is `agglab.X`).

Keep this file light: every `import agglab.ground` runs it first, so it imports nothing of the
project (a layer-0 import must not load the CLI) and only os from the standard library.
"""

import os

__version__ = "0.1.0"

# The folders the repository keeps beside this one and an install puts inside it (setup.py).
SIBLINGS = ("ground", "softswitch", "hosts", "pace", "controller", "emulation", "experiments", "exercises", "p4src")

_here = os.path.dirname(os.path.abspath(__file__))
_root = os.path.dirname(_here)
if not os.path.isdir(os.path.join(_here, "ground")) and os.path.isfile(os.path.join(_root, "ground", "paths.py")):
    __path__.append(_root)  # noqa: F821 (a package's __path__)
