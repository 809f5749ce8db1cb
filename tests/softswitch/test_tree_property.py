"""Property: a two-level aggregation tree of software switches delivers the exact sum.

Why: the tree roles (agg_child at the root, agg_child_of / agg_from_parent at
inner switches) only make sense together.  Here a root and 1..3 inner
switches, each with 1..4 workers, exchange frames in a random order with
random worker retransmissions (before or after results): every worker must get
the result, every result must be the exact int32 sum of all workers, and the
root must complete the slot exactly once.
"""

from __future__ import annotations

import random

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from agglab.ground import wire
from agglab.softswitch.pipeline import Pipeline
from agglab.testkit.frames import build

PARENT_PORT = 9
SVC = "02:a6:67:ff:ff:fe 10.255.255.254"


def build_tree(sizes: list[int]) -> tuple[Pipeline, list[Pipeline]]:
    root = Pipeline(seed=0)
    ports = " ".join(str(j + 1) for j in range(len(sizes)))
    for line in ("mc_mgrp_create 1", f"mc_node_create 0 {ports}", "mc_node_associate 1 0"):
        root.command(line)
    for j in range(len(sizes)):
        root.command(f"table_add agg_job agg_child 1 0 0 {j + 1} => {j} {len(sizes)} 1 0 1024 65535")
        root.command(f"table_add agg_reply agg_set_dst {j + 1} => {SVC} {SVC}")
    inner = []
    for n in sizes:
        p = Pipeline(seed=0)
        for line in ("mc_mgrp_create 2", "mc_node_create 0 " + " ".join(str(w + 1) for w in range(n)),
                     "mc_node_associate 2 0", f"table_add agg_job agg_from_parent 1 0 0 {PARENT_PORT} => {n} 2 0 1024"):
            p.command(line)
        for w in range(n):
            p.command(f"table_add agg_job agg_child_of 1 0 0 {w + 1} => {w} {n} 2 0 1024 65535 {PARENT_PORT}")
            p.command(f"table_add agg_reply agg_set_dst {w + 1} => {SVC} 02:00:00:00:00:{w + 1:02x} 10.0.0.{w + 1}")
        inner.append(p)
    return root, inner


@settings(max_examples=80, deadline=None)
@given(sizes=st.lists(st.integers(1, 4), min_size=1, max_size=3), seed=st.integers(0, 2**32 - 1),
       retx=st.integers(0, 6))
def test_two_level_tree_exact_sum(sizes, seed, retx):
    r, rng = random.Random(seed), np.random.default_rng(seed)
    root, inner = build_tree(sizes)
    vals = {(j, w): rng.integers(-2**31, 2**31, wire.K, dtype=np.int64).astype(np.int32)
            for j, n in enumerate(sizes) for w in range(n)}
    want = np.sum(list(vals.values()), axis=0, dtype=np.int64).astype(np.int32)
    packet = {(j, w): build({"from": f"h{w + 1}", "agg": {"job": 1, "slot": 3, "worker": w, "exp": 130},
                             "values": [int(v) for v in vals[j, w]]}) for (j, w) in vals}
    # in flight: (switch, ingress port, frame); switch -1 is the root
    flight = [(j, w + 1, packet[j, w]) for (j, w) in packet]
    pending_retx = [r.choice(list(packet)) for _ in range(retx)]
    received: dict[tuple[int, int], int] = {}
    while flight or pending_retx:
        if pending_retx and (not flight or r.random() < 0.3):
            j, w = pending_retx.pop()
            flight.append((j, w + 1, packet[j, w]))
        sw, port, frame = flight.pop(r.randrange(len(flight)))
        for eport, out in (root if sw < 0 else inner[sw]).process(port, frame):
            if sw < 0:
                flight.append((eport - 1, PARENT_PORT, out))        # root port j+1 -> inner j
            elif eport == PARENT_PORT:
                flight.append((-1, sw + 1, out))                    # inner j -> root port j+1
            else:
                got = np.frombuffer(out, ">i4", wire.K, wire.AGG_OFFSET + wire.AGG_HEADER_BYTES)
                np.testing.assert_array_equal(got, want)
                assert wire.unpack_agg(out, wire.AGG_OFFSET)["flags"] & wire.FLAG_RESULT
                received[sw, eport - 1] = received.get((sw, eport - 1), 0) + 1
    assert set(received) == set(packet), "every worker gets the result"
    assert root.counters["agg_stats"][wire.CONST["STAT_COMPLETE"]] == 1
