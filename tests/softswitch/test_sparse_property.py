"""Property: the sparse pipeline delivers the exact block-sparse sum to every worker.

Why: the conformance vectors pin single steps; this runs whole columns the way the
design's agents do (round 0 from everyone, then only the workers whose next non-zero
block the round is), in random arrival order, with retransmissions before and after
completion and zero probes from workers that have nothing for the round.  Every worker
rebuilds the dense result from the results it accepted (block == the one it waits for);
it must equal the int32 sum of all workers' data, and the rounds of a column must be
exactly its first block plus the union of the workers' non-zero blocks.  A worker that
does not send in the next round acknowledges the result (header-only ACK, sometimes twice),
as the agent does; the switch holds a version until every child is done with its round.
"""

from __future__ import annotations

import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agglab.ground import wire
from agglab.softswitch.pipeline import Pipeline
from agglab.testkit.frames import build

SPARSE, RETX, NONE, K = wire.CONST["AGG_FLAG_SPARSE"], wire.FLAG_RETX, wire.NEXT_NONE, wire.K
ACK = wire.CONST["AGG_FLAG_ACK"]
SVC = "02:a6:67:ff:ff:fe 10.255.255.254"


def switch(workers: int) -> Pipeline:
    p = Pipeline(seed=0)
    ports = " ".join(str(w + 1) for w in range(workers))
    for line in ("mc_mgrp_create 1", f"mc_node_create 0 {ports}", "mc_node_associate 1 0"):
        p.command(line)
    for w in range(workers):
        p.command(f"table_add agg_job agg_child 1 0 0 {w + 1} => {w} {workers} 1 0 1024 65535")
        p.command(f"table_add agg_reply agg_set_dst {w + 1} => {SVC} {SVC}")
    return p


def frame(w: int, slot: int, ver: int, block: int, nxt: int, values, flags: int = SPARSE) -> bytes:
    return build({"from": f"h{w + 1}", "agg": {"job": 1, "slot": slot, "ver": ver, "block": block,
                                               "next_block": nxt, "worker": w, "flags": flags},
                  "values": None if values is None else [int(v) for v in values]})


def ack(w: int, slot: int, ver: int, block: int) -> bytes:
    """The header-only acknowledgement a worker sends after accepting block's result."""
    return frame(w, slot, ver, block, 0, None, SPARSE | ACK)


@settings(max_examples=60, deadline=None)
@given(workers=st.integers(1, 5), slots=st.integers(1, 3), per_column=st.integers(1, 6),
       density=st.sampled_from([0.0, 0.2, 0.5, 1.0]), retx=st.sampled_from([0.0, 0.3]),
       seed=st.integers(0, 2**16))
def test_sparse_columns_are_exact(workers, slots, per_column, density, retx, seed):
    rng = random.Random(seed)
    nblocks = slots * per_column
    gen = np.random.default_rng(seed)
    data = gen.integers(-2**31, 2**31, (workers, nblocks, K), dtype=np.int64).astype(np.int32)
    data[gen.random((workers, nblocks)) >= density] = 0          # zero blocks
    p = switch(workers)
    got = np.zeros((workers, nblocks, K), dtype=np.int32)
    for s in range(slots):
        column = list(range(s, nblocks, slots))
        nonzero = [[b for b in column[1:] if data[w, b].any()] + [NONE] for w in range(workers)]
        m, r, rounds = s, 0, []
        while m != NONE:
            rounds.append(m)
            sends, senders = [], {w for w in range(workers) if r == 0 or nonzero[w][0] == m}
            for w in sorted(senders):
                if r:
                    nonzero[w].pop(0)
                sends.append(frame(w, s, r % 2, m, nonzero[w][0], data[w, m].view(np.uint32)))
            rng.shuffle(sends)
            extra = [(rng.randrange(len(sends) + 1), f) for f in sends if rng.random() < retx]
            for w in range(workers):                      # probes from workers not sending
                if w not in senders and rng.random() < retx:
                    extra.append((rng.randrange(len(sends) + 1), frame(w, s, r % 2, m, nonzero[w][0], [],
                                                                       SPARSE | RETX)))
            for pos, f in sorted(extra, key=lambda e: -e[0]):
                sends.insert(pos, f)
            results: dict[int, dict] = {}
            for f in sends:
                port = wire.unpack_agg(f, wire.AGG_OFFSET)["worker"] + 1
                for out_port, out in p.process(port, f):
                    head = wire.unpack_agg(out, wire.AGG_OFFSET)
                    assert head["flags"] & wire.FLAG_RESULT and head["block"] == m
                    vals = np.frombuffer(out, ">i4", K, wire.AGG_OFFSET + wire.AGG_HEADER_BYTES)
                    if out_port - 1 not in results:       # a worker takes the first result
                        results[out_port - 1] = head
                        got[out_port - 1, m] = vals
            assert sorted(results) == list(range(workers)), f"round {m}: results for {sorted(results)}"
            nexts = {h["next_block"] for h in results.values()}
            assert nexts == {min(n[0] for n in nonzero)}
            nxt = next(iter(nexts))
            acks = [ack(w, s, r % 2, m) for w in range(workers) if nxt == NONE or nonzero[w][0] != nxt]
            acks += [a for a in acks if rng.random() < retx]
            rng.shuffle(acks)
            for a in acks:
                assert p.process(wire.unpack_agg(a, wire.AGG_OFFSET)["worker"] + 1, a) == []
            m, r = nexts.pop(), r + 1
        union = sorted({b for w in range(workers) for b in column[1:] if data[w, b].any()})
        assert rounds == [s] + union
    want = data.astype(np.int64).sum(axis=0).astype(np.uint32).view(np.int32)   # int32 wrap-around
    for w in range(workers):
        assert np.array_equal(got[w], want), f"worker {w}"


def test_lost_result_two_rounds_behind_is_not_a_new_round():
    """h3 lost round 0's result and had nothing for round 4, so round 4 goes on without it;
    version 0 still holds round 0, which h3 has not acknowledged: round 8's first packet is
    held back (dropped, its sender's timer resends it), h3's retransmission of block 0 is
    answered with round 0's sum, and once h3 acknowledges, round 8 starts afresh."""
    p = switch(3)

    def send(w, ver, block, nxt, v, flags=SPARSE):
        return [(wire.unpack_agg(o, wire.AGG_OFFSET)["block"],
                 int(np.frombuffer(o, ">i4", 1, wire.AGG_OFFSET + wire.AGG_HEADER_BYTES)[0]))
                for _, o in p.process(w + 1, frame(w, 0, ver, block, nxt, [v], flags))]

    send(0, 0, 0, 4, 1), send(1, 0, 0, 4, 2), send(2, 0, 0, 12, 4)     # round 0: sum 7
    send(0, 1, 4, 8, 10), send(1, 1, 4, 8, 20)                          # round 4 without h3
    assert send(0, 0, 8, NONE, 100) == []                              # held back
    assert p.registers["sp_block"][0] == 0 and p.registers["sp_values"][0] == 7
    late = send(2, 0, 0, 12, 4, SPARSE | RETX)                          # h3 retransmits block 0
    assert late == [(0, 7)], late
    assert p.process(3, ack(2, 0, 0, 0)) == []                          # h3 is done with round 0
    assert send(0, 0, 8, NONE, 100) == []                               # h1's timer resends
    assert {v for _, v in send(1, 0, 8, NONE, 200)} == {300}


def test_stale_packet_touches_nothing():
    """A late packet for a block below the version's round is dropped, no state changes."""
    p = switch(2)
    for w, nxt in ((0, 2), (1, 2)):
        p.process(w + 1, frame(w, 0, 0, 0, nxt, [1]))
    for w in (0, 1):
        p.process(w + 1, frame(w, 0, 1, 2, 4, [2]))
    for w in (0, 1):
        p.process(w + 1, frame(w, 0, 0, 4, NONE, [3]))
    before = {name: reg.copy() for name, reg in p.registers.items() if name.startswith("sp_")}
    for w in (0, 1):
        assert p.process(w + 1, frame(w, 0, 0, 0, 2, [1], SPARSE | RETX)) == []
        assert p.process(w + 1, ack(w, 0, 0, 0)) == []
    assert all((p.registers[n] == before[n]).all() for n in before)
