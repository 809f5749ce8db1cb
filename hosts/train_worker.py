"""Entry point of one data-parallel training rank inside a Mininet host.

`python -m agglab.hosts.train_worker run.json RANK train.json`: trains hosts/mlp.py's model on
this rank's shard, summing the encoded gradients over the job through the emulated
network every step (hosts/communicator.py), and writes <out>.json (ok or error, the
loss/accuracy curve, allreduce statistics) and <out>.npy (final parameters).
"""

from __future__ import annotations

import json
import time
from dataclasses import fields

import numpy as np

from agglab.hosts.communicator import Communicator, rank_program
from agglab.hosts.mlp import Config, train

COUNTED = ("packets_sent", "retransmissions", "blocks", "blocks_sent", "epoch_changes")


def train_rank(comm: Communicator, config_path: str) -> dict:
    with open(config_path) as f:
        cfg = Config(**{k: v for k, v in json.load(f).items() if k in {x.name for x in fields(Config)}})
    totals = dict.fromkeys(COUNTED, 0)
    started = time.monotonic()

    def reduce(encoded):
        total = comm.allreduce(encoded[0])
        for key in COUNTED:
            totals[key] += getattr(comm.last_stats, key, 0) or 0
        return total

    result = train(cfg, [comm.rank], reduce, on_step=lambda step, _: comm.progress(step, cfg.steps))
    np.save(comm.seat.out + ".npy", result["params"])
    return dict(seconds=time.monotonic() - started, curve=result["curve"],
                final_accuracy=result["final_accuracy"], allreduces=comm.calls, call_log=comm.call_log, **totals)


if __name__ == "__main__":
    raise SystemExit(rank_program("one rank of `agglab train` (runs inside a host namespace)",
                                  "train.json: agglab.hosts.mlp.Config fields", train_rank))
