"""Property: any contribution order with any duplicates yields each exact sum once.

Why a property test on top of the vectors: the vectors pin individual cases;
the protocol's correctness rests on "for every interleaving of 2..8 workers'
copies, every slot-version completes exactly once with the int32 wrap-around
sum and the max exponent, and duplicates are answered from the stored result"
— including retransmissions of the previous version answered from the
shadow copy while the new version fills up, and register reuse two rounds on.
"""

from __future__ import annotations

import random

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from agglab.ground import wire
from agglab.softswitch.pipeline import Pipeline
from agglab.testkit.frames import build

K, MGRP = wire.K, 1


def make_switch(n: int) -> Pipeline:
    p = Pipeline(seed=0)
    p.command("mc_mgrp_create 1")
    p.command("mc_node_create 0 " + " ".join(str(w + 1) for w in range(n)))
    p.command("mc_node_associate 1 0")
    for w in range(n):
        p.command(f"table_add agg_job agg_child 1 0 0 {w + 1} => {w} {n} {MGRP} 0 1024 65535")
        p.command(f"table_add agg_reply agg_set_dst {w + 1} => 02:a6:67:ff:ff:fe 10.255.255.254 "
                  f"02:00:00:00:00:{w + 1:02x} 10.0.0.{w + 1}")
    return p


def contribution(w: int, slot: int, ver: int, values: np.ndarray, exp: int, retx: bool) -> bytes:
    return build({"from": f"h{w + 1}", "agg": {"job": 1, "slot": slot, "ver": ver, "worker": w, "exp": exp,
                                               "flags": 2 if retx else 0},
                  "values": [int(v) for v in values]})


def result_of(frame: bytes) -> tuple[np.ndarray, int, int, int]:
    agg = wire.unpack_agg(frame, wire.AGG_OFFSET)
    vals = np.frombuffer(frame, ">i4", K, wire.AGG_OFFSET + wire.AGG_HEADER_BYTES).astype(np.int32)
    return vals, agg["exp"], agg["slot"], agg["ver"]


def round_data(rng: np.random.Generator, n: int, slots: int):
    """Per slot: (values per worker, exps per worker), with extremes to force wrap-around."""
    out = []
    for _ in range(slots):
        vals = rng.integers(-2**31, 2**31, (n, K), dtype=np.int64).astype(np.int32)
        vals[:, 0] = 2**31 - 1                       # lane 0 always overflows for n >= 2
        exps = rng.integers(0, 256, n)
        out.append((vals, exps))
    return out


def check_round(p: Pipeline, n: int, data, ver: int, order: list, prev=None) -> None:
    """Feed `order` (events (kind, w, slot)) and check every emitted frame."""
    completed: set[int] = set()
    for kind, w, s in order:
        vals, exps = data[s] if kind != "old" else prev[s]
        v = ver if kind != "old" else 1 - ver
        out = p.process(w + 1, contribution(w, s, v, vals[w], int(exps[w]), retx=kind != "first"))
        want_sum = vals.sum(axis=0, dtype=np.int64).astype(np.int32)   # wraps like int32
        want_exp = int(exps.max())
        ports = [port for port, _ in out]
        if kind == "old":                             # shadow copy answers the lost result
            assert ports == [w + 1]
        elif kind == "first" and out:                 # the completing contribution
            assert s not in completed, "slot-version completed twice"
            assert ports == list(range(1, n + 1))
            completed.add(s)
        else:                                         # duplicates: answered only once complete
            assert ports == ([w + 1] if s in completed else [])
        for _port, frame in out:
            got, exp, slot, got_ver = result_of(frame)
            assert (slot, got_ver) == (s, v)
            np.testing.assert_array_equal(got, want_sum)
            assert exp == want_exp
    assert sorted(completed) == list(range(len(data))), "every slot completes exactly once"


def shuffled_round(r: random.Random, n: int, slots: int, dups: list[list[int]], old: bool) -> list:
    """Each worker's copies of each slot in order, workers interleaved at random."""
    queues = []
    for s in range(slots):
        for w in range(n):
            q = [("old", w, s)] * (r.randint(0, 1) if old else 0)
            q += [("first", w, s)] + [("dup", w, s)] * dups[s][w]
            queues.append(q)
    order = []
    while queues:
        q = r.choice(queues)
        order.append(q.pop(0))
        if not q:
            queues.remove(q)
    return order


@settings(max_examples=60, deadline=None)
@given(n=st.integers(2, 8), slots=st.integers(1, 4), rounds=st.integers(3, 4),
       seed=st.integers(0, 2**32 - 1), dup_max=st.integers(0, 3))
def test_any_order_any_duplicates_gives_each_sum_once(n, slots, rounds, seed, dup_max):
    """Round k uses version k % 2, so rounds >= 3 reuse registers (overwrite, shadow bits)."""
    r, rng = random.Random(seed), np.random.default_rng(seed)
    p = make_switch(n)
    prev = None
    for k in range(rounds):
        data = round_data(rng, n, slots)
        dups = [[r.randint(0, dup_max) for _ in range(n)] for _ in range(slots)]
        check_round(p, n, data, k % 2, shuffled_round(r, n, slots, dups, old=k > 0), prev=prev)
        prev = data
    stats = p.counters["agg_stats"]
    assert stats[wire.CONST["STAT_COMPLETE"]] == rounds * slots
    assert stats[wire.CONST["STAT_CONTRIB"]] == rounds * slots * n
    assert stats[wire.CONST["STAT_REJECT"]] == 0
