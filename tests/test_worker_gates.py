"""hosts/worker.py between its gates: a rank passes the start gate before its call, its time
ends when it has the result, and it writes its files only after the end gate (so a rank that
has its result takes no core from a peer that has not: ground/start_gate.py). A fake clock
and fake gates; one rank of the ring baseline, which with one worker sums without a network."""

from __future__ import annotations

import json
import types
from pathlib import Path

import numpy as np

from agglab.ground.runspec import RunPlan, RunSpec, WorkerSeat
from agglab.hosts import worker


def test_the_time_ends_before_the_end_gate_and_the_files_come_after_it(tmp_path, monkeypatch):
    spec = RunSpec(workers=1, algorithm="ring", elements=64).validate()
    seat = WorkerSeat(rank=0, local_ip="10.0.0.1", out=str(tmp_path / "rank0"))
    plan = RunPlan(spec, "10.0.0.254", 16, None, [seat])
    now = [0.0]
    events = []

    def tick():                                   # every reading of the clock advances it 1 s
        now[0] += 1.0
        return now[0]

    def start_gate(timeout):
        events.append("start")
        return 0.0

    def end_gate(timeout):
        events.append(("end", Path(seat.out + ".json").exists(), Path(seat.out + ".npy").exists()))
        now[0] += 1000.0                          # the peers take long to read theirs
        return 1000.0

    monkeypatch.setattr(worker, "time", types.SimpleNamespace(monotonic=tick, process_time=tick))
    monkeypatch.setattr(worker, "wait_to_start", start_gate)
    monkeypatch.setattr(worker, "wait_at_end", end_gate)
    assert worker.run_seat(plan, seat) == 0
    report = json.loads(Path(seat.out + ".json").read_text())
    assert report["ok"], report.get("error")
    assert events == ["start", ("end", False, False)]
    assert report["end_wait_s"] == 1000.0 and 0 < report["wall"] < 1000
    assert np.array_equal(np.load(seat.out + ".npy"), worker.gradient_for(spec, 0))
