"""Where things live: repository directories and per-run state.

Every process the project starts records itself under RUN_ROOT so that
`agglab clean` can find and remove what a crashed run left behind.
"""

import os
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
P4SRC = REPO / "p4src"
P4_INCLUDE = P4SRC / "include"
RUN_ROOT = Path(os.environ.get("AGGLAB_RUN_ROOT", "/tmp/agglab-run"))
