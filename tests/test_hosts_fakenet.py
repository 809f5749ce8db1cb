"""Agents and the software switch together: real frames through softswitch.Pipeline.

Why: beside the agent's own tests (tests/test_hosts_agent.py, on the same pipeline),
this file proves the agent and the project's P4 pipeline (programmed with the same CLI commands the controller
uses) agree on the wire format, the slot/version semantics, the reply
addressing and loss recovery.
"""

import time

import numpy as np
import pytest

from agglab.ground import wire
from agglab.testkit.fakenet import FakeNet
from agglab.softswitch.star import star_commands
from agglab.hosts import quantization as qz
from agglab.hosts.agent import AllreduceTimeout, LengthMismatchError
from agglab.softswitch.pipeline import Pipeline

K = wire.K
STAT = {name: wire.CONST[name] for name in ("STAT_CONTRIB", "STAT_COMPLETE", "STAT_REJECT",
                                            "STAT_DUP_REPLY", "STAT_DUP_DROP", "STAT_SIM_DROP")}


def ints(n, length, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.integers(-2**31, 2**31 - 1, length, dtype=np.int32) for _ in range(n)]


def ok(results):
    for r in results:
        if isinstance(r, BaseException):
            raise r
    return results


def stats(net):
    return {name: int(net.switch.counters["agg_stats"][i]) for name, i in STAT.items()}


@pytest.mark.parametrize("n", [2, 4, 8])
@pytest.mark.parametrize("length", [1000, K * 7 + 5])
def test_int32_exact(n, length):
    arrays = ints(n, length, seed=n + length)
    net = FakeNet(n, backend="pipeline")
    results = ok(net.run(arrays, give_up=20))
    expected = np.sum(arrays, axis=0, dtype=np.int32)
    for out, _ in results:
        assert out.dtype == np.int32 and np.array_equal(out, expected)
    s = results[0][1]
    rounds = 1 + s.blocks                        # int32: slot 0's lead round, one per block
    counters = stats(net)
    assert counters["STAT_COMPLETE"] == rounds
    assert counters["STAT_CONTRIB"] == n * rounds and counters["STAT_REJECT"] == 0


@pytest.mark.parametrize("n", [2, 8])
def test_float32_within_error_bound(n):
    rng = np.random.default_rng(n)
    length = K * 9 + 17
    scale = 10.0 ** np.repeat(rng.integers(-6, 7, -(-length // K)), K)[:length]
    arrays = [(rng.standard_normal(length) * scale).astype(np.float32) for _ in range(n)]
    exact = np.sum([a.astype(np.float64) for a in arrays], axis=0)
    padded = np.zeros(-(-length // K) * K)
    padded[:length] = np.max(np.abs(arrays), axis=0)
    bound = np.repeat([qz.error_bound(qz.block_exponent(b), n)
                       for b in padded.reshape(-1, K)], K)[:length]
    for out, _ in ok(FakeNet(n, backend="pipeline").run(arrays, window=4, give_up=20)):
        assert out.dtype == np.float32
        err = np.abs(out.astype(np.float64) - exact)
        assert np.all(err <= bound), (err / bound).max()
        assert np.any(err > 0)      # really quantised, not passed through as int bits


def test_loss_5_percent_both_directions_exact():
    arrays = ints(4, K * 50 + 3, seed=5)
    net = FakeNet(4, backend="pipeline", loss=0.05, seed=2)
    results = ok(net.run(arrays, window=8, timeout=0.005, give_up=20))
    for out, _ in results:
        assert np.array_equal(out, np.sum(arrays, axis=0, dtype=np.int32))
    assert sum(s.retransmissions for _, s in results) > 0
    counters = stats(net)
    assert counters["STAT_DUP_REPLY"] + counters["STAT_DUP_DROP"] > 0


def test_switch_drop_simulator_loss_exact():
    """Loss made by the switch's own drop_sim tables (as experiments configure it)."""
    n, arrays = 2, ints(2, K * 30, seed=9)
    p = Pipeline(seed=4)
    for cmd in star_commands(n):
        p.command(cmd)
    threshold = round(0.05 * 2**32)
    for port in (1, 2):
        p.command(f"table_add drop_sim set_drop_rate {port} => {threshold}")
        p.command(f"table_add drop_sim_egress set_drop_rate {port} => {threshold}")
    net = FakeNet(n, backend="pipeline", pipeline=p)
    results = ok(net.run(arrays, window=8, timeout=0.005, give_up=20))
    for out, _ in results:
        assert np.array_equal(out, np.sum(arrays, axis=0, dtype=np.int32))
    assert stats(net)["STAT_SIM_DROP"] > 0
    assert sum(s.retransmissions for _, s in results) > 0


def test_window_smaller_than_job_and_repeated_calls():
    net = FakeNet(3, backend="pipeline")
    for call in range(3):
        arrays = ints(3, K * 11 + 1, seed=call)          # 12 blocks, the last of one value
        for out, s in ok(net.run(arrays, window=3, give_up=20)):
            assert s.slots == 3 and s.blocks == 12
            assert np.array_equal(out, np.sum(arrays, axis=0, dtype=np.int32)), f"call {call}"


def test_mismatched_lengths_raise_on_every_worker():
    arrays = ints(4, 1000)
    arrays[1] = np.concatenate([arrays[1], np.zeros(K, np.int32)])    # 1000 + K: one block more
    results = FakeNet(4, backend="pipeline").run(arrays, give_up=5)
    assert all(isinstance(r, LengthMismatchError) for r in results), results
    # mean (3 * 1000 + 1000 + K) / 4 = 1000 + K / 4: 1016 at K=64, 1064 at K=256
    assert f"length {1000 + K}" in str(results[1]) and f"mean length {1000 + K // 4}" in str(results[1])
    assert "length 1000" in str(results[0])


def test_worker_whose_switch_never_answers_times_out_naming_slots():
    """No agg_reply entry for port 2: the switch drops every result for worker 1."""
    p = Pipeline()
    for cmd in star_commands(2):
        if not cmd.startswith("table_add agg_reply agg_set_dst 2 "):
            p.command(cmd)
    net = FakeNet(2, backend="pipeline", pipeline=p)
    results = net.run(ints(2, K * 6), window=4, give_up=0.5, join_timeout=60)
    assert all(isinstance(r, AllreduceTimeout) for r in results), results
    deaf = str(results[1])
    assert "slot 0 round 0 (lead" in deaf             # int32: only slot 0 leads,
    for slot in range(1, 4):                            # the others start with their first block
        assert f"slot {slot} round 1 (block {slot}" in deaf
    assert "No result ever arrived" in deaf and "agg_reply" in deaf
    assert "slot 0 round 1 (block 0" in str(results[0])


@pytest.mark.slow
def test_8_workers_1m_int32_benchmark(capsys):
    """The figure quoted in the reports: 8 x 1M int32 through the in-process harness."""
    arrays = ints(8, 1_000_000, seed=1)
    net = FakeNet(8, backend="pipeline")
    start = time.monotonic()
    results = ok(net.run(arrays, give_up=30))
    elapsed = time.monotonic() - start
    expected = np.sum(arrays, axis=0, dtype=np.int32)
    assert all(np.array_equal(out, expected) for out, _ in results)
    with capsys.disabled():
        print(f"\n8 workers x 1M int32 via softswitch.Pipeline: {elapsed:.2f} s, "
              f"retransmissions {sum(s.retransmissions for _, s in results)}")
