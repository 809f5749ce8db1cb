"""The host baselines (hosts/ring.py, hosts/ps.py) over loopback TCP, without Mininet.

Each worker runs in a thread with its own 127.0.0.x address, exactly as the worker
process runs it in a Mininet host; expectations are numpy sums of the same inputs
(hosts/gradients.py), never the code under test.
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass

import numpy as np
import pytest

from agglab.ground.runspec import RunSpec
from threads import on_threads
from agglab.hosts import ps, ring
from agglab.hosts.checker import summation_error_bound
from agglab.hosts.consistency import ConsistencyError, LengthMismatchError
from agglab.hosts.diagnostics import AllreduceTimeout
from agglab.hosts.gradients import exact_sum, inputs_for
from agglab.hosts.mesh_allreduce import segment_bounds
from agglab.hosts.tcp_peer import PeerError

ALGORITHMS = {"ring": ring.allreduce, "ps": ps.allreduce}
_ports = itertools.count(31_000)          # a fresh port per run: no TIME_WAIT surprises


@dataclass
class Failed:
    exc: BaseException


def run_all(algorithm: str, arrays, *, peers=None, **kwargs) -> list:
    """allreduce(arrays[rank]) on every rank in threads; per rank (result, stats) or the exception."""
    n = len(arrays)
    peers = peers or [f"127.0.0.{r + 1}" for r in range(n)]
    port = next(_ports)

    def work(rank: int):
        try:
            return ALGORITHMS[algorithm](arrays[rank], rank=rank, peers=peers, port=port,
                                         return_stats=True, **kwargs)
        except BaseException as exc:     # checked by the test (on_threads would raise it)
            return Failed(exc)

    return [o.exc if isinstance(o, Failed) else o for o in on_threads(n, work)]


def assert_exact(results, inputs) -> None:
    errors = [f"rank {r}: {x!r}" for r, x in enumerate(results) if isinstance(x, BaseException)]
    assert not errors, "\n".join(errors)
    outs = [out for out, _stats in results]
    expected = exact_sum(inputs)
    for out in outs:
        assert out.dtype == inputs[0].dtype and out.shape == expected.shape
        if out.dtype == np.int32:
            assert np.array_equal(out, expected)
        else:
            assert np.all(np.abs(out.astype(np.float64) - expected) <= summation_error_bound(inputs))
    assert all(np.array_equal(outs[0], o) for o in outs[1:]), "ranks returned different bits"


CASES = [(n, length) for n in (2, 3, 5, 8, 16) for length in sorted({1, 7, n - 1, 100_003})]


@pytest.mark.parametrize("algorithm", ["ring", "ps"])
@pytest.mark.parametrize("dtype", ["int32", "float32"])
@pytest.mark.parametrize("workers,elements", CASES)
def test_exact_for_2_to_16_workers_and_odd_lengths(algorithm, dtype, workers, elements):
    spec = RunSpec(workers=workers, elements=elements, dtype=dtype, seed=workers, algorithm=algorithm).validate()
    inputs = inputs_for(spec)
    assert_exact(run_all(algorithm, inputs, give_up=20), inputs)


@pytest.mark.parametrize("algorithm", ["ring", "ps"])
def test_int32_sums_wrap_like_numpy(algorithm):
    rng = np.random.default_rng(7)
    inputs = [rng.integers(-2**31, 2**31, 10_001).astype(np.int32) for _ in range(6)]
    results = run_all(algorithm, inputs, give_up=20)
    expected = np.sum(np.stack(inputs), axis=0, dtype=np.int32)
    assert (np.abs(np.stack(inputs).astype(np.int64).sum(axis=0)) > 2**31).any()    # it does wrap
    for out, _stats in results:
        assert np.array_equal(out, expected)


@pytest.mark.parametrize("algorithm", ["ring", "ps"])
def test_small_chunks_pipeline_many_messages(algorithm):
    """A chunk of 3 values: every segment is many messages, so the sender must wait for
    exactly the chunk it forwards (ring) / the server for every worker's chunk (ps)."""
    spec = RunSpec(workers=4, elements=1_001, dtype="float32", seed=3)
    inputs = inputs_for(spec)
    results = run_all(algorithm, inputs, give_up=20, chunk_bytes=12)
    assert_exact(results, inputs)
    assert all(stats.messages_sent > 4 * 1_001 // 3 // 4 for _out, stats in results)


@pytest.mark.parametrize("algorithm", ["ring", "ps"])
def test_each_worker_sends_2_n_minus_1_over_n_of_the_array(algorithm):
    n, length = 8, 80_000
    inputs = [np.ones(length, dtype=np.int32) for _ in range(n)]
    results = run_all(algorithm, inputs, give_up=20)
    for out, stats in results:
        assert np.array_equal(out, np.full(length, n, dtype=np.int32))
        assert stats.bytes_sent == 2 * (n - 1) * length * 4 // n


@pytest.mark.parametrize("workers,elements", [(2, 1), (3, 7), (5, 100_003)])
def test_a_central_ps_is_exact(workers, elements):
    spec = RunSpec(workers=workers, elements=elements, dtype="float32", seed=workers, algorithm="ps").validate()
    inputs = inputs_for(spec)
    assert_exact(run_all("ps", inputs, give_up=20, layout="central"), inputs)


def test_a_central_ps_host_moves_every_array_and_the_others_one_each():
    """Central: rank 0 serves everything. Each other worker pushes its whole array (length x 4 B)
    and sends nothing else; rank 0 sends the sum back to each of the n-1 others."""
    n, length = 4, 10_000
    inputs = [np.full(length, r + 1, dtype=np.int32) for r in range(n)]
    results = run_all("ps", inputs, give_up=20, layout="central")
    for rank, (out, stats) in enumerate(results):
        assert np.array_equal(out, np.full(length, 1 + 2 + 3 + 4, dtype=np.int32))
        assert stats.bytes_sent == ((n - 1) * length * 4 if rank == 0 else length * 4), rank


def test_shard_bounds_by_layout():
    assert ps.shard_bounds(10, 3) == [(0, 3), (3, 6), (6, 10)]
    assert ps.shard_bounds(10, 3, "central") == [(0, 10), (10, 10), (10, 10)]
    with pytest.raises(ValueError, match="ps layout must be one of sharded, central, got 'ring'"):
        ps.shard_bounds(10, 3, "ring")


def test_ring_schedule_reduces_every_segment_once_per_other_rank():
    """Replaying the schedule on tokens: after the reduce-scatter each segment held by its
    owner has every rank's contribution once; after the all-gather every rank has all."""
    n, length = 5, 23
    bufs = [[{r} for _ in range(length)] for r in range(n)]      # per element: the ranks summed in
    plans = [ring.schedule(r, n, length, chunk=2) for r in range(n)]
    for step in range(2 * (n - 1)):
        msgs = {}
        for r in range(n):
            msgs[(r + 1) % n] = [(lo, hi, [set(bufs[r][i]) for i in range(lo, hi)])
                                 for t, lo, hi, _ in plans[r][0] if t == step]
        for r in range(n):
            recvs = [(lo, hi, add) for t, lo, hi, add in plans[r][1] if t == step]
            assert [(lo, hi) for lo, hi, _ in msgs[r]] == [(lo, hi) for lo, hi, _ in recvs]
            for (lo, hi, values), (_, _, add) in zip(msgs[r], recvs):
                for i, v in zip(range(lo, hi), values):
                    assert not add or not (v & bufs[r][i]), "a contribution counted twice"
                    bufs[r][i] = (bufs[r][i] | v) if add else v
    assert all(b == [set(range(n))] * length for b in bufs)


def test_segments_cover_the_array():
    for length, parts in [(1, 16), (7, 3), (100_003, 16), (15, 16)]:
        segs = segment_bounds(length, parts)
        assert segs[0][0] == 0 and segs[-1][1] == length and len(segs) == parts
        assert all(a[1] == b[0] for a, b in zip(segs, segs[1:]))
        assert max(hi - lo for lo, hi in segs) - min(hi - lo for lo, hi in segs) <= 1


@pytest.mark.parametrize("algorithm", ["ring", "ps"])
def test_a_different_length_is_refused_not_summed(algorithm):
    inputs = [np.zeros(100, np.int32), np.zeros(100, np.int32), np.zeros(99, np.int32)]
    results = run_all(algorithm, inputs, give_up=2)
    # the two ends that meet the short array say so; a rank whose peer gave up first cannot
    # tell it from a peer that never started, and says that (naming it) at the setup deadline
    assert all(isinstance(x, (ConsistencyError, PeerError, AllreduceTimeout)) for x in results), results
    mismatch = [x for x in results if isinstance(x, LengthMismatchError)]
    assert mismatch and "99" in str(mismatch[0]) and "100" in str(mismatch[0])


@pytest.mark.parametrize("algorithm", ["ring", "ps"])
def test_a_peer_that_never_starts_is_named_before_the_deadline(algorithm):
    """Rank 2's address has no worker: the others give up at the setup deadline, naming it."""
    peers = ["127.0.0.1", "127.0.0.2", "127.0.0.3"]
    arrays = [np.zeros(10, np.int32)] * 2
    port = next(_ports)

    def work(rank):
        try:
            return ALGORITHMS[algorithm](arrays[rank], rank=rank, peers=peers, port=port, give_up=1.0)
        except BaseException as exc:
            return Failed(exc)

    results = [getattr(o, "exc", o) for o in on_threads(2, work)]      # on_threads: none may hang
    named = [x for x in results if isinstance(x, AllreduceTimeout) and "rank 2" in str(x) and "127.0.0.3" in str(x)]
    assert named, results
    assert all(isinstance(x, (AllreduceTimeout, PeerError)) for x in results), results


def test_one_worker_returns_its_input_without_a_network():
    x = np.arange(5, dtype=np.float32)
    for allreduce in ALGORITHMS.values():
        out = allreduce(x, rank=0, peers=["127.0.0.1"])
        assert np.array_equal(out, x) and out is not x


def test_float32_bound_is_tight_enough_to_catch_a_wrong_sum():
    """The bound the checker applies is a few ulps of the magnitude, not a blanket tolerance:
    dropping the smallest contribution of an element is caught."""
    spec = RunSpec(workers=8, elements=1_000, dtype="float32", seed=1)
    inputs = inputs_for(spec)
    bound = summation_error_bound(inputs)
    expected = exact_sum(inputs)
    smallest = np.min(np.abs(np.stack(inputs)), axis=0).astype(np.float64)
    assert (smallest > bound).mean() > 0.5
    assert np.all(np.abs(expected.astype(np.float32).astype(np.float64) - expected) <= bound)


@pytest.mark.parametrize("algorithm,dtype", [("ring", "float32"), ("ps", "int32")])
def test_worker_entry_point_and_checker(algorithm, dtype, tmp_path, monkeypatch):
    """hosts/worker.py as the session runs it (RunPlan, peers from the seats), on block-sparse
    data run densely, then the session's checker on the reports: exact, same JSON keys."""
    from agglab.ground.runspec import RunPlan, WorkerSeat
    from agglab.hosts import worker
    from agglab.hosts.checker import check

    n = 4
    from agglab.hosts import tcp_mesh

    monkeypatch.setattr(tcp_mesh, "BASE_PORT", next(_ports))     # read by the hosts' runner at call time
    spec = RunSpec(workers=n, elements=5_003, dtype=dtype, seed=9, algorithm=algorithm, density=0.3).validate()
    seats = [WorkerSeat(rank=r, local_ip=f"127.0.0.{r + 1}", out=str(tmp_path / f"rank{r}"),
                        progress=str(tmp_path / f"rank{r}.progress")) for r in range(n)]
    plan = RunPlan(spec, "10.255.255.254", 1, None, seats).write(tmp_path / "run.json")
    assert RunPlan.read(plan).peers() == [f"127.0.0.{r + 1}" for r in range(n)]
    codes = on_threads(n, lambda r: worker.main([str(plan), str(r)]))
    reports, arrays = [], []
    for r in range(n):
        report = json.loads((tmp_path / f"rank{r}.json").read_text())
        assert codes[r] == 0 and report["ok"], report
        done, total = (tmp_path / f"rank{r}.progress").read_text().split()
        assert done == total                                  # progress reached the end
        reports.append(report)
        arrays.append(np.load(tmp_path / f"rank{r}.npy"))
    result = check(spec, [dict(rep, result=a) for rep, a in zip(reports, arrays)], {})
    assert result["ok"] and result["exact"] and result["algorithm"] == algorithm
    for key in ("seconds", "goodput_mbps", "packets", "retransmissions", "max_abs_error", "error_bound"):
        assert result[key] is not None, key
    arrays[1] = arrays[1].copy()
    arrays[1][17] += 1                                       # one value off by one on one rank
    assert not check(spec, [dict(rep, result=a) for rep, a in zip(reports, arrays)], {})["exact"]


@pytest.mark.parametrize("changes,message", [
    (dict(algorithm="ring", tree="rat"), "leave --tree at spt"),
    (dict(algorithm="ps", topology="bcube", tree="bml"), "BCube"),
])
def test_runspec_rules_for_the_baselines(changes, message):
    with pytest.raises(ValueError, match=message):
        RunSpec(**changes).validate()


def test_runspec_accepts_baselines_on_sparse_data_and_many_workers():
    spec = RunSpec(algorithm="ring", density=0.1, zero_workers=2, workers=64).validate()
    assert spec.host_baseline and spec.sparse_data
    assert not RunSpec(algorithm="switchml").validate().host_baseline


@pytest.mark.parametrize("algorithm", ["ring", "ps"])
def test_a_training_loop_calls_the_baseline_through_the_communicator(algorithm, tmp_path):
    """agglab.hosts.communicator: repeated allreduce(array) calls on ring/ps, as a training loop makes them."""
    from agglab.ground.runspec import RunPlan, WorkerSeat
    from agglab.hosts.communicator import Communicator

    n = 3
    spec = RunSpec(workers=n, algorithm=algorithm, job=next(_ports) - 29_500).validate()
    seats = [WorkerSeat(rank=r, local_ip=f"127.0.0.{r + 1}", out=str(tmp_path / f"rank{r}")) for r in range(n)]
    plan = RunPlan(spec, "10.255.255.254", 1, None, seats)
    rng = np.random.default_rng(2)
    steps = [[rng.standard_normal(333).astype(np.float32) for _ in range(n)] for _ in range(3)]

    def work(r):
        comm = Communicator(plan, r, transport=object())     # the baselines use TCP, not the UDP transport
        return [comm.allreduce(step[r]) for step in steps]

    out = on_threads(n, work)
    for i, step in enumerate(steps):
        bound = summation_error_bound(step)
        for r in range(n):
            assert np.all(np.abs(out[r][i].astype(np.float64) - exact_sum(step)) <= bound)


def test_a_worker_connects_to_its_peers_at_once_not_one_after_another():
    """Eight peers answer a hello only once all eight have one: a worker that waited for each
    peer's hello before connecting to the next (a 128-worker PS would wait 127 round trips in
    a row) never gets past the first."""
    import socket
    import threading

    from agglab.hosts.tcp_mesh import open_mesh
    from agglab.hosts.tcp_peer import HELLO_STRUCT, Hello

    n, port = 9, next(_ports)
    addrs = [f"127.0.0.{r + 1}" for r in range(n)]
    all_hellos = threading.Barrier(n - 1, timeout=5)
    listeners = []
    for r in range(1, n):
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((addrs[r], port))
        sock.listen(1)
        listeners.append((r, sock))

    def peer(r, listener):
        conn, _ = listener.accept()
        with conn:
            got = b""
            while len(got) < HELLO_STRUCT.size:
                got += conn.recv(HELLO_STRUCT.size - len(got))
            all_hellos.wait()
            conn.sendall(Hello("ps", r, n, 10, np.dtype(np.int32)).pack())
            conn.recv(1)                     # until rank 0 closes

    threads = [threading.Thread(target=peer, args=(r, s), daemon=True) for r, s in listeners]
    for t in threads:
        t.start()
    try:
        mesh = open_mesh(Hello("ps", 0, n, 10, np.dtype(np.int32)), addrs, list(range(1, n)), [], port=port,
                         give_up=2.0)
        assert sorted(p.rank for p in mesh.peers()) == list(range(1, n))
        mesh.close()
    finally:
        for _, s in listeners:
            s.close()
        for t in threads:
            t.join(5)


def test_setup_time_grows_with_the_handshakes_a_slow_link_must_carry():
    """254 connections (a PS of 128 workers) at 0.1 Mb/s: their setup is 254 x 230 B = 58,420 B
    on the worker's link, 4.67 s at that rate; unshaped, only 2 x give_up."""
    from agglab.hosts.tcp_mesh import SETUP_SLACK, setup_seconds

    assert setup_seconds(254, 10.0) == 20.0
    assert setup_seconds(254, 10.0, 0.1) == pytest.approx(20.0 + SETUP_SLACK * 4.6736)
    assert setup_seconds(2, 10.0, 20.0) == pytest.approx(20.0, abs=0.01)    # a ring at 20 Mb/s: as before


@pytest.mark.parametrize("algorithm", ["ring", "ps"])
def test_the_communicator_opens_connections_once_before_the_first_call_and_keeps_them(algorithm, tmp_path,
                                                                                      monkeypatch):
    """A baseline's connections are set up by `prepare` (before the start gate, in a worker)
    and kept for every call on arrays of that length: ring 1 and PS n-1 connections a rank
    over 3 calls, the first call reporting the setup's time and the later ones none. A new
    length opens new ones."""
    from agglab.ground.runspec import RunPlan, WorkerSeat
    from agglab.hosts import tcp_mesh
    from agglab.hosts.communicator import Communicator

    opened = []
    real_connect = tcp_mesh._connect
    monkeypatch.setattr(tcp_mesh, "_connect", lambda hello, *a, **k: (opened.append(hello.rank), real_connect(hello, *a, **k))[1])
    n = 4
    spec = RunSpec(workers=n, algorithm=algorithm, job=next(_ports) - 29_500).validate()
    seats = [WorkerSeat(rank=r, local_ip=f"127.0.0.{r + 1}", out=str(tmp_path / f"rank{r}")) for r in range(n)]
    plan = RunPlan(spec, "10.255.255.254", 1, None, seats)
    steps = [[np.full(1000, 10 * s + r, dtype=np.int32) for r in range(n)] for s in range(3)]

    def work(r):
        comm = Communicator(plan, r, transport=object())
        comm.prepare(steps[0][r])
        out = [comm.allreduce_with_stats(step[r]) for step in steps]
        comm.close()
        return out

    out = on_threads(n, work)
    per_rank = 1 if algorithm == "ring" else n - 1
    assert sorted(opened) == sorted(r for r in range(n) for _ in range(per_rank))     # once, not per call
    for s, step in enumerate(steps):
        want = sum(10 * s + r for r in range(n))                  # hand-computed: 4 ranks, 10s + r each
        for r in range(n):
            result, stats = out[r][s]
            assert (result == want).all()
            assert (stats.setup_seconds > 0) == (s == 0)

    opened.clear()

    def other_length(r):
        comm = Communicator(plan, r, transport=object())
        comm.allreduce(np.ones(10, dtype=np.int32))
        result = comm.allreduce(np.ones(20, dtype=np.int32))
        comm.close()
        return result

    assert all((x == n).all() and len(x) == 20 for x in on_threads(n, other_length))
    assert len(opened) == 2 * n * per_rank                        # a new length: new connections


@pytest.mark.parametrize("module", [ring, ps])
def test_a_tcp_baseline_outwaits_its_links_rto_floor(module, monkeypatch):
    """The session floors a host route's RTO at 512 full frames' time on its link (1,514 bytes
    each: at 0.525 Mb/s 11.81 s), so a baseline that gave up after the default 10 s died of one
    segment resent at the RTO. Its limit is 2.5 floors on a shaped link, the given one
    otherwise (worked by hand, not with ground/links.py)."""
    from agglab.hosts.mesh_allreduce import tcp_give_up

    floor_s = round(512 * 1514 * 8 / 0.525e6 * 1e3) / 1e3          # 11.811 s
    assert tcp_give_up(10.0, 0.525) == pytest.approx(2.5 * floor_s)
    assert tcp_give_up(60.0, 0.525) == 60.0                          # a longer limit stays
    assert tcp_give_up(10.0, None) == 10.0                           # unshaped: Linux's own 200 ms floor
    assert tcp_give_up(10.0, 100.0) == 10.0                          # 100 Mb/s: the floor is 200 ms
    seen = {}

    def fake_over_mesh(algorithm, body, array, **kw):
        seen.update(kw)
        return array

    monkeypatch.setattr(module, "allreduce_over_mesh", fake_over_mesh)
    module.allreduce(np.zeros(4, np.int32), rank=0, peers=["10.0.0.1", "10.0.0.2"], give_up=10.0, link_mbps=0.525)
    assert seen["give_up"] == pytest.approx(2.5 * floor_s)
