"""Start software-switch processes by forking one that has already imported the switch.

Why: a switch process spends about 0.2 CPU-seconds importing Python, numpy and the
pipeline before it can serve a packet; the 80 switches of a k=8 fat-tree spent 16 of them,
most of what a 2-core machine did while the network started. The fork server
(ground/forkserver.py) imports all of that once and then forks one child per switch on
request. Each child is a switch process as before (its own pid, session, log file and exit
code; it crashes alone), it only starts with everything imported.
"""

from __future__ import annotations

from agglab.ground.forkserver import UNKNOWN_EXIT, ForkedProcess  # noqa: F401 - this module's API
from agglab.ground.forkserver import Launcher as ForkServer

# what every switch starts with imported
PRELOAD = ("agglab.softswitch.__main__", "agglab.softswitch.daemon", "agglab.softswitch.pipeline")


class Launcher(ForkServer):
    """A running fork server with the switch imported, and the switches it forked for us."""

    def __init__(self, out_path, cwd=None, env=None):
        super().__init__(out_path, PRELOAD, cwd=cwd, env=env, what="switch launcher")

    def spawn(self, argv: list[str], out_path) -> ForkedProcess:
        """Start `python -m agglab.softswitch ARGV` (stdout and stderr appended to `out_path`)."""
        name = argv[argv.index("--name") + 1] if "--name" in argv else "?"
        return super().spawn("agglab.softswitch.__main__", argv, out_path, name=f"softswitch:{name}")
