"""hosts/replay_worker.py's serve mode: one communicator replays list after list.

No network: a stand-in communicator records what it was asked to allreduce, so the test
checks the order, the answers and the stop, not timing."""

from __future__ import annotations

import json
import os
import threading
from types import SimpleNamespace

from agglab.hosts import replay_worker


class Comm:
    """What replay_work uses of a Communicator: rank, allreduce, last_stats, progress, calls."""

    def __init__(self, rank: int):
        self.rank, self.calls, self.sizes = rank, 0, []
        self.last_stats = SimpleNamespace(retransmissions=1)

    def allreduce(self, array):
        self.calls += 1
        self.sizes.append(len(array))
        return array

    def progress(self, done, total):
        pass


def post(inbox, n, work):
    tmp = inbox / f"{n:03d}.tmp"
    tmp.write_text(json.dumps(work))
    os.replace(tmp, inbox / f"{n:03d}.json")


def test_one_process_serves_every_list_in_order_until_stop(tmp_path):
    comm, out = Comm(rank=1), {}
    worker = threading.Thread(target=lambda: out.update(replay_worker.replay(comm, str(tmp_path))))
    worker.start()
    post(tmp_path, 0, {"iterations": 1, "transfers": [{"ready_s": 0, "elements": 10}, {"ready_s": 0, "elements": 20}]})
    post(tmp_path, 1, {"iterations": 2, "transfers": [{"ready_s": 0, "elements": 30}]})
    post(tmp_path, 2, {"stop": True})
    worker.join(30)
    assert not worker.is_alive()
    assert out == {"served": 2, "calls": 1 + 2 + 2}          # one warm-up, then 2 + 2 x 1 transfers
    assert comm.sizes == [64, 10, 20, 30, 30]
    first = json.loads(replay_worker.answer_path(tmp_path, 0, 1).read_text())
    second = json.loads(replay_worker.answer_path(tmp_path, 1, 1).read_text())
    assert len(first["iterations"]) == 1 and len(first["iterations"][0]) == 2 and first["retransmissions"] == 2
    assert len(second["iterations"]) == 2 and second["retransmissions"] == 2
    for start, end in first["iterations"][0]:
        assert 0 <= start <= end
