"""Where things live: the project's files, results, and per-run state.

One lookup serves a checkout and an installed agglab (`pip install .`): the source tree's
top-level directories (ground/, p4src/, exercises/, ...) are installed side by side inside the
one package site-packages/agglab/ (setup.py), p4src/ and exercises/ as package data, so REPO,
this folder's parent, is the checkout's root or site-packages/agglab, and `REPO / "p4src"` is
the P4 source in both. IMPORT_ROOT is the folder a child process needs on its path (or as its
working directory) to import this same copy of `agglab`: the checkout's root, where agglab/ sits
beside the other folders, or site-packages when installed (never site-packages/agglab, whose
folders would then be top-level names again). Only what a run writes differs: RESULTS is the
checkout's results/ (not committed), or ./results under the current directory when agglab is
installed, and BUILD the checkout's build/ or ~/.cache/agglab (site-packages is no place for
output).

Every process the project starts records itself under RUN_ROOT so that
`agglab clean` can find and remove what a crashed run left behind.

Why not a fixed path in /tmp: root writes into the run directory and deletes from it, and
/tmp is world-writable, so a local user who created `/tmp/agglab-run` first (or a symlink
there) would own what root writes and steer what it deletes. The run root is therefore
under a location only its owner can create in: /run/agglab for root (/run is root's), and
$XDG_RUNTIME_DIR/agglab (a per-user 0700 directory) for anyone else, falling back to a
per-uid directory in /tmp, which ground/rundir.py's `secure_dir` checks before every use
(owner, mode, no symlink). AGGLAB_RUN_ROOT overrides it (tests use temporary directories);
it is checked the same way.
"""

import os
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
IMPORT_ROOT = REPO.parent if (REPO / "__init__.py").is_file() else REPO
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


def default_run_root() -> Path:
    """The run root of the current user when AGGLAB_RUN_ROOT is not set (see the module's
    docstring for why not /tmp)."""
    if os.geteuid() == 0:
        return Path("/run/agglab")
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime and Path(runtime).is_absolute():
        return Path(runtime) / "agglab"
    return Path(f"/tmp/agglab-run-{os.geteuid()}")


RUN_ROOT = Path(os.environ.get("AGGLAB_RUN_ROOT") or default_run_root())
# The machine-wide network lease (ground/netlease.py): interface names are machine-wide, so the
# lease is too, wherever a run keeps its directory (AGGLAB_RUN_ROOT moves run directories only).
NET_LEASE = default_run_root() / "network.lock"
