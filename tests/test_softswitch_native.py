"""The C engine (softswitch/native.py) gives exactly what Pipeline.process gives frame after frame.

Why: the switch daemon runs dense first contributions through the C engine when it was built
and the Python pipeline is the reference. Two identical switches see the same receive
batches (test_softswitch_batch's streams: clean rounds mixed with duplicates, old versions,
both versions of a slot, foreign, sparse, short and rejected frames, a forged worker, a port
twice among the replicas, an inner switch): one through `process` per frame, the other
through the engine, falling back to `process` for each frame it declines, as the daemon
does. Every egress port must get the same frames in the same order, every register and
counter must end equal, and the engine must have taken the clean batches whole.
"""

from __future__ import annotations

import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agglab.softswitch import native
from tests.test_softswitch_batch import SLOT, make, stream

pytestmark = pytest.mark.skipif(not native.AVAILABLE, reason=native.describe())


def through_engine(p, port: int, frames: list[bytes], outs: dict) -> tuple[int, int]:
    """The daemon's drain on one batch: the engine while it takes frames, `process` for each
    it declines (its staged outputs first, so each port keeps the order). (taken, drops)"""
    arena = bytearray(len(frames) * SLOT)
    for i, f in enumerate(frames):
        arena[i * SLOT:i * SLOT + len(f)] = f
    lens = np.array([len(f) for f in frames], np.uint32)
    eng = p.native.engine
    i = taken = drops = 0
    while i < len(frames):
        k, d = p.native.run(port, arena, SLOT, lens, i, len(frames)) if lens[i] >= 45 else (0, 0)
        if k == 0 and eng.staged:                  # its output arena was full: empty it, again
            k, d = p.native.run(port, arena, SLOT, lens, i, len(frames))
        for e, out in eng.take():
            outs.setdefault(e, []).append(out)
        if k:
            i, taken, drops = i + k, taken + k, drops + d
            continue
        got = p.process(port, frames[i])
        drops += not got
        for e, out in got:
            outs.setdefault(e, []).append(bytes(out))
        i += 1
    return taken, drops


def run_both(role: str, n: int, batches, drop_sim: bool = False) -> tuple[int, int, int]:
    a, b = make(role, n), make(role, n)
    assert b.native is not None
    if drop_sim:
        for p in (a, b):
            p.command("table_add drop_sim_egress set_drop_rate 2 => 1000000000")
    outs_a: dict[int, list[bytes]] = {}
    outs_b: dict[int, list[bytes]] = {}
    drops_a = drops_b = taken = frames = 0
    for port, batch in batches:
        frames += len(batch)
        for f in batch:
            got = a.process(port, f)
            drops_a += not got
            for e, out in got:
                outs_a.setdefault(e, []).append(bytes(out))
        k, d = through_engine(b, port, batch, outs_b)
        taken, drops_b = taken + k, drops_b + d
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
    return taken, frames, sum(len(v) for v in outs_a.values())


@settings(max_examples=300, deadline=None, derandomize=True)
@given(role=st.sampled_from(["root", "root-mgrp0", "inner", "root-dup-port"]), n=st.integers(1, 8),
       slots=st.integers(1, 30), rounds=st.integers(1, 5), mess=st.sampled_from([0.0, 0.1, 0.5]),
       seed=st.integers(0, 2**32 - 1))
def test_engine_equals_frame_by_frame(role, n, slots, rounds, mess, seed):
    batches = stream(random.Random(seed), np.random.default_rng(seed), n, slots, rounds, mess)
    taken, frames, _ = run_both(role, n, batches)
    if mess == 0.0 and not (role == "inner" and slots > 40):
        assert taken == frames, "clean streams must go through the engine whole"


@pytest.mark.parametrize("role", ["root", "inner", "root-dup-port"])
def test_clean_rounds_take_the_engine_and_emit_every_result(role):
    r, rng = random.Random(1), np.random.default_rng(1)
    taken, frames, emitted = run_both(role, 8, stream(r, rng, 8, 30, 4, 0.0))
    assert taken == frames == 8 * 30 * 4
    # root: 4 rounds x 30 slots to the 7 workers that have agg_reply; inner: each partial up
    # once; a second node on port 1: 8 replicas, all with agg_reply
    assert emitted == {"root": 4 * 30 * 7, "inner": 4 * 30, "root-dup-port": 4 * 30 * 9}[role]


def test_drop_simulator_declines_and_matches():
    r, rng = random.Random(2), np.random.default_rng(2)
    taken, _, _ = run_both("root", 4, stream(r, rng, 4, 20, 3, 0.0), drop_sim=True)
    assert taken == 0


def test_a_full_output_arena_is_emptied_and_nothing_lost(monkeypatch):
    """More results than the engine's output arena holds (OUT_CAP 8 here: a batch of up to 12
    frames completing rounds with 7 replicas each): the engine stops before the frame whose
    results do not fit, the caller empties it, and the stream goes on, exact."""
    monkeypatch.setattr(native, "OUT_CAP", 8)
    r, rng = random.Random(4), np.random.default_rng(4)
    taken, frames, emitted = run_both("root", 8, stream(r, rng, 8, 30, 4, 0.0))
    assert taken == frames and emitted == 4 * 30 * 7
