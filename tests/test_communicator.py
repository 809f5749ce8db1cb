"""The Communicator (hosts/communicator.py) in-process: a training loop's repeated
allreduces, the reroute file followed between calls, and training identical to one process."""

from __future__ import annotations

import json

import numpy as np
import pytest

from agglab.testkit.fakenet import FakeNet, sparse_net
from agglab.ground import wire
from threads import on_threads
from agglab.ground.runspec import RunPlan, RunSpec, WorkerSeat
from agglab.hosts.communicator import Communicator
from agglab.hosts.mlp import Config, train, train_single_process


def plan(tmp_path, n: int, algorithm: str = "switchml", epoch_file=None) -> RunPlan:
    spec = RunSpec(workers=n, algorithm=algorithm).validate()
    seats = [WorkerSeat(rank=r, local_ip=f"10.0.0.{r + 1}", out=str(tmp_path / f"rank{r}"),
                        progress=str(tmp_path / f"rank{r}.progress")) for r in range(n)]
    return RunPlan(spec, "10.0.0.254", 16, epoch_file, seats)


def test_repeated_allreduces_with_the_epoch_file(tmp_path):
    n, net = 3, FakeNet(3, backend="pipeline")
    epoch_file = tmp_path / "epoch.json"
    epoch_file.write_text(json.dumps({"epoch": 0, "tree_of_slot": [0] * 16, "status": "ok"}))
    p = plan(tmp_path, n, epoch_file=str(epoch_file))
    rng = np.random.default_rng(1)
    inputs = [[rng.integers(-2**20, 2**20, 1000).astype(np.int32) for _ in range(n)] for _ in range(4)]

    def work(r):
        comm = Communicator(p, r, transport=net.transports[r])
        sums = [comm.allreduce(step[r]) for step in inputs]
        comm.progress(4, 4)
        return sums, comm.calls, comm.call_log

    for sums, calls, log in on_threads(n, work):
        assert calls == 4
        assert [b for b, _ in log] == [4000] * 4 and all(s > 0 for _, s in log)   # 1000 int32 a call
        for got, step in zip(sums, inputs):
            assert np.array_equal(got, sum(x.astype(np.int64) for x in step).astype(np.int32))
    assert (tmp_path / "rank0.progress").read_text().split() == ["4", "4"]


@pytest.mark.parametrize("algorithm,topk", [("switchml", 1.0), ("switchml", 0.25), ("omnireduce", 0.25)])
def test_training_through_the_switch_pipeline_equals_one_process(tmp_path, algorithm, topk):
    n = 2
    net = FakeNet(n, backend="pipeline")
    cfg = Config(workers=n, steps=12, eval_every=4, topk=topk)
    p = plan(tmp_path, n, algorithm=algorithm)

    def work(r):
        comm = Communicator(p, r, transport=net.transports[r])
        return train(cfg, [r], lambda enc: comm.allreduce(enc[0]))

    results = on_threads(n, work)
    reference = train_single_process(cfg)
    for res in results:
        assert np.array_equal(res["params"], reference["params"])     # int32 fixed point: exact
        assert res["curve"] == reference["curve"]
    assert reference["curve"][-1]["train_loss"] < reference["curve"][0]["train_loss"]


def test_float32_training_differs_only_by_switch_rounding(tmp_path):
    n = 2
    net = FakeNet(n, backend="pipeline")
    cfg = Config(workers=n, steps=8, eval_every=4, dtype="float32")
    p = plan(tmp_path, n)

    def work(r):
        comm = Communicator(p, r, transport=net.transports[r])
        return train(cfg, [r], lambda enc: comm.allreduce(enc[0]))

    got = on_threads(n, work)[0]["params"]
    diff = np.max(np.abs(got.astype(np.float64) - train_single_process(cfg)["params"]))
    assert 0 <= diff < 1e-4          # SwitchML fixed point: ~n^2 * max|g| * 2^-31 per step


def block_sparse(rng, blocks: int, density: float) -> np.ndarray:
    """int32 values in K-blocks, each block non-zero with probability `density`."""
    x = rng.integers(-1000, 1000, (blocks, wire.K)).astype(np.int32)
    x[rng.random(blocks) >= density] = 0
    return x.ravel()


@pytest.mark.parametrize("calls", [2, 3])
def test_consecutive_sparse_allreduces_without_reset_are_exact(calls):
    """No register reset between the calls: the lead round's dense completion re-arms each
    slot's sparse state (docs/design/sparse.md "Sparse pipeline"), so no call sees another's announcements."""
    n = 3
    net = sparse_net(n)       # the software switch, one pipeline
    rng = np.random.default_rng(calls)
    for blocks, density in [(12, 0.3), (7, 0.7), (12, 1.0)][:calls]:
        arrays = [block_sparse(rng, blocks, density) for _ in range(n)]
        want = arrays[0] + arrays[1] + arrays[2]
        for res in net.run(arrays, sparse=True, window=4, give_up=5):
            assert not isinstance(res, BaseException), res
            assert np.array_equal(res[0], want)


def test_from_env_without_agglab_is_a_clear_error(monkeypatch):
    monkeypatch.delenv("AGGLAB_PLAN", raising=False)
    with pytest.raises(RuntimeError, match="AGGLAB_PLAN is not set"):
        Communicator.from_env()


def test_a_training_loop_of_sparse_calls_is_exact(tmp_path):
    n, net = 2, sparse_net(2)
    p = plan(tmp_path, n, algorithm="omnireduce")
    rng = np.random.default_rng(7)
    steps = [[block_sparse(rng, 10, 0.5) for _ in range(n)] for _ in range(3)]

    def work(r):
        comm = Communicator(p, r, transport=net.transports[r])
        return [comm.allreduce(step[r]) for step in steps]

    for got in on_threads(n, work):
        for out, step in zip(got, steps):
            assert np.array_equal(out, step[0] + step[1])


@pytest.mark.parametrize("algorithm", ["switchml", "omnireduce"])
def test_the_start_gate_is_passed_once_before_a_ranks_first_packet(tmp_path, algorithm):
    """The agents call Communicator.ready once the call's state is built: before that rank sent
    anything, once for the first call only (hosts/worker.py hangs the start gate on it)."""
    n = 3
    net = sparse_net(n) if algorithm == "omnireduce" else FakeNet(n, backend="pipeline")
    net.record = True
    p = plan(tmp_path, n, algorithm=algorithm)
    arrays = [np.where(np.arange(4096) % 97 == r, r + 1, 0).astype(np.int32) for r in range(n)]

    def work(r):
        comm = Communicator(p, r, transport=net.transports[r])
        seen = []
        comm.on_ready = lambda: seen.append(sum(1 for rank, *_ in list(net.sent) if rank == r))
        sums = [comm.allreduce(arrays[r]) for _ in range(2)]
        return seen, sums

    for seen, sums in on_threads(n, work):
        assert seen == [0]                   # once, and nothing of this rank on the wire yet
        for got in sums:
            assert np.array_equal(got, sum(arrays))
    assert {rank for rank, *_ in net.sent} == set(range(n))


def test_a_scheme_that_does_not_call_ready_gets_it_before_its_call(tmp_path, monkeypatch):
    from agglab.hosts.schemes import CALLS_READY, RUNNERS
    name = next(s for s in sorted(RUNNERS) if s not in CALLS_READY)
    order = []

    def runner(comm, array):
        order.append("call")
        return array, {}
    monkeypatch.setitem(RUNNERS, name, runner)
    comm = Communicator(plan(tmp_path, 1, algorithm=name), 0, transport=object())
    comm.on_ready = lambda: order.append("ready")
    comm.allreduce(np.arange(4, dtype=np.int32))
    comm.allreduce(np.arange(4, dtype=np.int32))
    assert order == ["ready", "call", "call"]
