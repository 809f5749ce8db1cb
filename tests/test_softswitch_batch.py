"""Pipeline.process_batch gives exactly what Pipeline.process gives frame after frame.

Why: the daemon hands whole receive batches to process_batch (softswitch/batch.py), which
vectorises a batch of first contributions to distinct slots and otherwise declines. Two
identical switches see the same batches, one through `process` per frame, the other
through `process_batch` (falling back to `process` when it declines, as the daemon does):
every egress port must get the same frames in the same order, every register and counter
must end equal, and the fast path must actually have taken most batches. The streams mix
clean rounds with what must be declined: duplicates, the old version, both versions of a
slot, foreign, sparse, short and rejected frames, a forged worker, the drop simulator.
"""

from __future__ import annotations

import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agglab.ground import wire
from agglab.softswitch.bench_pipeline import worker_frame
from agglab.softswitch.pipeline import Pipeline
from agglab.softswitch.roles import job_entry
from agglab.softswitch.star import star_commands

SLOT = 2048                   # row stride of the receive arena the batches are copied into
PARENT = 9


def make(role: str, n: int) -> Pipeline:
    p = Pipeline(seed=5)
    if role == "root":
        for line in star_commands(n, job=1):
            p.command(line)
        if n > 2:                                    # a child without agg_reply: no result there
            p.command("table_delete agg_reply 1")
    elif role == "root-dup-port":                    # two nodes of the group share port 1
        for line in star_commands(n, job=1) + ["mc_node_create 1 1", "mc_node_associate 1 1"]:
            p.command(line)
    elif role == "root-mgrp0":                       # mgrp 0: the result goes to port 0 alone
        p.command("table_add agg_reply agg_set_dst 0 => 02:a6:67:ff:ff:fe 10.255.255.254 "
                  "02:00:00:00:00:09 10.0.0.9")
        for w in range(n):
            p.command(job_entry(1, 0, 0, w + 1, child=w, fan_in=n, mgrp=0, worker=w).command())
    else:                                            # inner switch: partials go up to PARENT
        for w in range(n):
            p.command(job_entry(1, 0, 0, w + 1, child=w, fan_in=n, mgrp=0, slot_base=3, slots=40,
                                parent_port=PARENT).command())
    return p


def rows_of(frames: list[bytes]) -> tuple[np.ndarray, np.ndarray]:
    rows = np.zeros((len(frames), SLOT), np.uint8)
    for i, f in enumerate(frames):
        rows[i, :len(f)] = np.frombuffer(f, np.uint8)
    return rows, np.array([len(f) for f in frames], np.uint32)


def stream(r: random.Random, rng: np.random.Generator, n: int, slots: int, rounds: int, mess: float):
    """Batches (port, [frames]) of `rounds` rounds on `slots` slots, workers interleaved,
    each worker's frames of a round cut into batches; with probability `mess` a batch gets
    something the fast path must decline."""
    out, sent = [], []
    for k in range(rounds):
        chunks = []
        for w in range(n):
            order = list(range(slots))
            r.shuffle(order)
            while order:
                size = r.randint(1, 12)
                frames = [worker_frame(w, s, k % 2, k * slots + s, rng, exp=r.randint(100, 160))
                          for s in order[:size]]
                order = order[size:]
                chunks.append([w + 1, frames])
        r.shuffle(chunks)
        for port, frames in chunks:
            w = port - 1
            sent += [(port, f) for f in frames]
            if r.random() < mess:
                kind = r.choice(["dup", "old", "both", "foreign", "sparse", "short", "worker", "pad",
                                 "reject", "other-port"])
                s = r.randrange(slots)
                extra = {
                    "dup": lambda: r.choice(sent)[1],
                    "old": lambda: worker_frame(w, s, (k + 1) % 2, s, rng),
                    "both": lambda: worker_frame(w, s, (k + 1) % 2, s, rng),
                    "foreign": lambda: bytes.fromhex("ffffffffffff020000000001" "0806") + bytes(28),
                    "sparse": lambda: worker_frame(w, s, k % 2, s, rng, flags=wire.CONST["AGG_FLAG_SPARSE"]),
                    "short": lambda: frames[0][:100],
                    "worker": lambda: worker_frame((w + 1) % n, s, k % 2, s, rng),
                    "pad": lambda: frames[0] + bytes(4),
                    "reject": lambda: worker_frame(w, wire.SLOTS - 1, k % 2, s, rng),
                    "other-port": lambda: r.choice(sent)[1],
                }[kind]()
                frames.insert(r.randint(0, len(frames)), extra)
            out.append((port, frames))
    return out


def run_both(role: str, n: int, batches, drop_sim: bool = False):
    a, b = make(role, n), make(role, n)
    if drop_sim:
        for p in (a, b):
            p.command("table_add drop_sim_egress set_drop_rate 2 => 1000000000")
    outs_a: dict[int, list[bytes]] = {}
    outs_b: dict[int, list[bytes]] = {}
    drops_a = drops_b = taken = 0
    for port, frames in batches:
        for f in frames:
            got = a.process(port, f)
            drops_a += not got
            for e, out in got:
                outs_a.setdefault(e, []).append(bytes(out))
        rows, lens = rows_of(frames)
        res = b.process_batch(port, rows, lens)
        if res is None:
            for f in frames:
                got = b.process(port, f)
                drops_b += not got
                for e, out in got:
                    outs_b.setdefault(e, []).append(bytes(out))
        else:
            taken += 1
            got, nd = res
            drops_b += nd
            for e, arr in got:
                assert arr.dtype == np.uint8 and arr.ndim == 2
                outs_b.setdefault(e, []).extend(bytes(row) for row in arr)
    assert outs_a.keys() == outs_b.keys()
    for e in outs_a:
        assert outs_a[e] == outs_b[e], f"egress port {e} differs"
    assert drops_a == drops_b
    for name in a.registers:
        np.testing.assert_array_equal(a.registers[name], b.registers[name], err_msg=name)
    for name in a.counters:
        np.testing.assert_array_equal(a.counters[name], b.counters[name], err_msg=name)
        np.testing.assert_array_equal(a.counter_arrays[name].bytes, b.counter_arrays[name].bytes,
                                      err_msg=name)
    return taken, sum(len(v) for v in outs_a.values())


@settings(max_examples=40, deadline=None)
@given(role=st.sampled_from(["root", "root-mgrp0", "inner", "root-dup-port"]), n=st.integers(1, 8),
       slots=st.integers(1, 30), rounds=st.integers(1, 5), mess=st.sampled_from([0.0, 0.1, 0.5]),
       seed=st.integers(0, 2**32 - 1))
def test_batch_equals_frame_by_frame(role, n, slots, rounds, mess, seed):
    batches = stream(random.Random(seed), np.random.default_rng(seed), n, slots, rounds, mess)
    taken, emitted = run_both(role, n, batches)
    if mess == 0.0 and role != "root-dup-port":
        assert taken == len(batches), "clean batches must all take the fast path"
        assert emitted > 0 or role == "inner" and slots > 40


@pytest.mark.parametrize("role", ["root", "inner"])
def test_clean_rounds_take_the_fast_path_and_emit_every_result(role):
    r, rng = random.Random(1), np.random.default_rng(1)
    batches = stream(r, rng, 8, 30, 4, 0.0)
    taken, emitted = run_both(role, 8, batches)
    assert taken == len(batches)
    # root: 4 rounds x 30 slots to the 7 workers that have agg_reply; inner: each partial up once
    assert emitted == (4 * 30 * 7 if role == "root" else 4 * 30)


def test_drop_simulator_declines_and_matches():
    r, rng = random.Random(2), np.random.default_rng(2)
    taken, _ = run_both("root", 4, stream(r, rng, 4, 20, 3, 0.0), drop_sim=True)
    assert taken == 0


def test_declined_batch_changes_nothing():
    p = make("root", 4)
    rng = np.random.default_rng(3)
    frames = [worker_frame(0, 1, 0, 1, rng), worker_frame(0, 1, 0, 1, rng)]   # one slot twice
    before = {k: v.copy() for k, v in p.registers.items()}
    rows, lens = rows_of(frames)
    assert p.process_batch(1, rows, lens) is None
    for k, v in p.registers.items():
        np.testing.assert_array_equal(v, before[k], err_msg=k)
    assert not p.counters["agg_stats"].any()
