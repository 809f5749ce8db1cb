"""The agent's C core (hosts/native.py) does exactly what DenseRun.on_batch does, result after result.

Why: an int32 allreduce runs its accept loop and data rounds through hosts/fastagent.c when it
was built, and the Python code in hosts/agent.py is the reference. Two identical runs (same
array, window, rank, workers, job, link rate, starting versions) see the same receive
batches: clean results mixed with duplicates (old round, wrong version, wrong block), other
jobs, slots past the window, queries (no RESULT flag), short payloads, retransmitted results
from us and from others, the slot-0 lead (right, or proving a worker-count mismatch), and
timers firing (resends, so a later result is timed from its resend). One run uses the C
core, the other is forced onto the Python path. After every step both must have sent the
same payloads in the same order and hold the same per-slot state, sums and counters.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agglab.ground import wire
from agglab.hosts import native
from agglab.hosts.agent import DenseRun, WorkerCountMismatchError
from agglab.hosts.consistency import lead_lanes
from agglab.hosts.slots import LEAD_VERSIONS

pytestmark = pytest.mark.skipif(not native.enabled(), reason=native.describe())

K = wire.K
KINDS = ("good", "good", "good", "good", "old_version", "wrong_block", "other_job", "past_window", "query",
         "short", "retx_own", "retx_other", "bad_lead")
STATE = ("round", "v0", "agreed", "sent_at", "last_sent", "tries", "deadline", "packet", "depart", "done",
         "remaining", "parked")


class Recorder:
    """A one-payload Transport that keeps what the agent sends and never receives."""

    def __init__(self):
        self.sent: list[bytes] = []

    def send(self, payload: bytes) -> None:
        self.sent.append(bytes(payload))

    def recv(self, timeout: float):
        return None


def make(length, window, rank, workers, job, link_mbps, v0, seed):
    arr = np.random.default_rng(seed).integers(-2**31, 2**31, length, dtype=np.int64).astype(np.int32)
    t = Recorder()
    LEAD_VERSIONS[t] = {job: np.array(v0 + [0] * (wire.SLOTS - len(v0)), np.uint8)}
    run = DenseRun(arr, t, rank, workers, job, 0, 0, window, 0.02, 10.0, None, None, None, link_mbps)
    run.remaining = run.S
    return run, t


def result(ref: DenseRun, kind: str, s: int, exp: int, worker: int, lanes_seed: int) -> bytes:
    """A payload the switch could send this agent, built from the reference run's state."""
    S = ref.S
    r = ref.round[s] if s < S else 0
    ver = ((ref.v0[s] if s < S else 0) + r) & 1
    block = s if r == 0 else s + (r - 1) * S
    flags, job = wire.FLAG_RESULT, ref.job
    if kind == "old_version":
        ver ^= 1
    elif kind == "wrong_block":
        block += 1
    elif kind == "other_job":
        job = (job + 1) % 256
    elif kind == "query":
        flags = 0
    elif kind in ("retx_own", "retx_other"):
        flags |= wire.FLAG_RETX
        worker = ref.rank if kind == "retx_own" else (ref.rank + 1) % 256
    if s == 0 and r == 0:
        times = ref.n + 1 if kind == "bad_lead" else ref.n
        lanes = times * lead_lanes(length=ref.length, window=S, dtype=ref.dtype)
    else:
        lanes = np.random.default_rng(lanes_seed).integers(-2**31, 2**31, K, dtype=np.int64).astype(np.int32)
    p = wire.pack_agg(job=job, tree=0, epoch=0, flags=flags, ver=ver, slot=s, worker=worker, exp=exp,
                      block=block % 2**32) + lanes.astype(">i4").tobytes()
    return p[:wire.PAYLOAD_BYTES - 1] if kind == "short" else p


def batch_arrays(payloads: list[bytes], width: int, strided: bool):
    rows = np.zeros((len(payloads), width), np.uint8)
    for i, p in enumerate(payloads):
        rows[i, :min(len(p), width)] = np.frombuffer(p, np.uint8)[:width]
    if strided:                                  # as MsgBatch.received: uint32, every 16th word
        words = np.zeros((len(payloads), 16), np.uint32)
        words[:, 14] = [len(p) for p in payloads]
        return rows, words[:, 14]
    return rows, np.array([len(p) for p in payloads], np.int64)


def same(a: DenseRun, ta: Recorder, b: DenseRun, tb: Recorder) -> None:
    assert tb.sent == ta.sent
    for name in STATE:
        assert getattr(b, name) == getattr(a, name), name
    assert np.array_equal(b.sums, a.sums)
    assert b.stats == a.stats
    assert (b.rtt.srtt, b.rtt.rttvar, b.rtt.rto) == (a.rtt.srtt, a.rtt.rttvar, a.rtt.rto)


step = st.one_of(
    st.tuples(st.just("batch"), st.lists(st.tuples(st.sampled_from(KINDS), st.integers(0, 9), st.integers(0, 255),
                                                   st.integers(0, 3), st.integers(0, 2**32 - 1)),
                                         min_size=1, max_size=12)),
    st.tuples(st.just("expire"), st.just(None)))


@settings(max_examples=300, deadline=None, derandomize=True)
@given(length=st.integers(1, 700), window=st.integers(1, 8), rank=st.integers(0, 2), more=st.integers(0, 2),
       job=st.integers(0, 255), link_mbps=st.sampled_from([None, 1.0, 100.0]),
       v0=st.lists(st.integers(0, 1), min_size=8, max_size=8), seed=st.integers(0, 9),
       width=st.sampled_from([wire.PAYLOAD_BYTES, 4096]), strided=st.booleans(),
       steps=st.lists(step, min_size=1, max_size=30))
def test_the_c_core_matches_the_python_reference(length, window, rank, more, job, link_mbps, v0, seed, width,
                                                 strided, steps):
    a, ta = make(length, window, rank, rank + 1 + more, job, link_mbps, v0, seed)
    b, tb = make(length, window, rank, rank + 1 + more, job, link_mbps, v0, seed)
    a.native = None                          # the reference
    assert b.native is not None
    now = 0.0
    a.start(now)
    b.start(now)
    same(a, ta, b, tb)
    for what, items in steps:
        if not a.remaining:
            break
        now += 0.001
        if what == "expire":
            now = max(now, min(a.deadline)) if min(a.deadline) < float("inf") else now
            a.expire(now)
            b.expire(now)
        else:
            payloads = [result(a, kind, s, exp, worker, ls) for kind, s, exp, worker, ls in items]
            rows, lens = batch_arrays(payloads, width, strided)
            errors = []
            for run in (a, b):
                try:
                    errors.append(run.on_batch(rows, lens, now))
                except WorkerCountMismatchError as exc:
                    errors.append(str(exc))
            assert errors[1] == errors[0]
            if isinstance(errors[0], str):
                return                       # the allreduce fails there, on both paths alike
        same(a, ta, b, tb)


def test_a_float_run_stays_on_the_python_path():
    run, _t = make(10, 2, 0, 1, 0, None, [0] * 8, 0)
    assert run.native is not None
    f = DenseRun(np.ones(10, np.float32), Recorder(), 0, 1, 0, 0, 0, 2, 0.02, 10.0, None, None, None)
    assert f.native is None
