"""The epoch file: how the controller tells a job's agents about reroutes.

Why here, beside RunPlan: it is a contract between two layers that cannot import each other
(the controller writes it, the host agents read it), like the plan itself. One JSON object:
`epoch` (the header's 8-bit epoch field the agents put on every packet), `tree_of_slot`
(which tree each slot uses), `status` (OK, REROUTING: hold retransmissions until the next
epoch, PARTITIONED: stop with the reason), `reason`, and on shaped links `tree_mbps` (each
tree's slowest link, so the agents' timers outlast a window queued there).

Why a file: agents run in other network namespaces but share the filesystem; the
controller replaces it atomically. Why compare the bytes, not the mtime: a reroute writes
it several times within milliseconds ("rerouting", then the new epoch), and a filesystem's
timestamp granularity (a jiffy on some) can give two versions the same mtime, so an agent
that saw the first would never see the second. Reading ~200 bytes every poll (5 ms) costs
microseconds.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

OK = "ok"
REROUTING = "rerouting"          # a reroute is under way: a pause, not a stall
PARTITIONED = "partitioned"      # the workers cannot reach each other any more
EPOCH_MASK = 0xFF                # agg_h.epoch is 8 bits


def publish(path: Path, epoch: int, tree_of_slot, status: str = OK, reason: str = "",
            tree_mbps: dict | None = None) -> None:
    """Atomically replace the epoch file the agents watch."""
    path = Path(path)
    data = {"epoch": epoch & EPOCH_MASK, "tree_of_slot": tree_of_slot, "status": status, "reason": reason}
    if tree_mbps:
        data["tree_mbps"] = {str(t): mbps for t, mbps in tree_mbps.items()}
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data))
    os.replace(tmp, path)


class EpochFile:
    """The reader's side: poll() returns the file's content when it changed, else None."""

    def __init__(self, path: str):
        self.path = path
        self.seen: bytes | None = None

    def poll(self) -> dict | None:
        try:
            with open(self.path, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            return None
        if data == self.seen:
            return None
        self.seen = data
        return json.loads(data)
