"""Where things live: the project's files, results, and per-run state.

One lookup serves a checkout and an installed agglab (`pip install .`): the source tree's
top-level directories (ground/, p4src/, exercises/, ...) are installed side by side into
site-packages, p4src/ and exercises/ as package data, so `REPO / "p4src"` is the P4 source
in both. Only what a run writes differs: RESULTS is the checkout's results/ (not committed),
or ./results under the current directory when agglab is installed, and BUILD the checkout's
build/ or ~/.cache/agglab (site-packages is no place for output).

Every process the project starts records itself under RUN_ROOT so that
`agglab clean` can find and remove what a crashed run left behind.
"""

import os
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
P4SRC = REPO / "p4src"
P4_INCLUDE = P4SRC / "include"
# Conformance vectors: packets in, packets out and register state that the P4 program and the
# software switch must both produce (vectors/ for AGG_K, vectors/k<K>/ for the wide variant).
VECTORS = P4SRC / "vectors"
EXERCISES = REPO / "exercises"
CHECKOUT = (REPO / "pyproject.toml").is_file()
RESULTS = REPO / "results" if CHECKOUT else Path.cwd() / "results"
# Compiled P4 (BMv2 JSON per variant): the checkout's build/, or the user's cache when installed.
BUILD = REPO / "build" if CHECKOUT else Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "agglab"
RUN_ROOT = Path(os.environ.get("AGGLAB_RUN_ROOT", "/tmp/agglab-run"))
