"""hosts/bml_host.py over real TCP on loopback: every BCube host is a thread of this process.

Why loopback 127.(l+1).0.(i+1): every 127/8 address is local on Linux, so each host gets one
distinct IP per NIC as in Mininet, and the traffic never leaves the machine. The plan goes
through JSON as it would from the parent process to a worker.
"""

from __future__ import annotations

import gc
import json
import os
import socket
import threading
import warnings

import numpy as np
import pytest

from agglab.testkit.waits import wait_until
from agglab.controller.topologies import bcube
from agglab.controller.trees.bml import schedule, simulate_bml
from agglab.hosts.bml_host import (FRAME, HELLO, BmlHostError, connect_host_bml, plan_from_json, plan_to_json,
                            run_host_bml)

SHAPES = [(2, 1), (3, 1)]


@pytest.fixture(autouse=True)
def nothing_left_behind():
    """No thread, no open descriptor and no unclosed-socket warning survives a test."""
    gc.collect()
    threads, fds = set(threading.enumerate()), len(os.listdir("/proc/self/fd"))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ResourceWarning)
        yield
        gc.collect()
    assert set(threading.enumerate()) == threads
    assert len(os.listdir("/proc/self/fd")) == fds
    assert not [w for w in caught if issubclass(w.category, ResourceWarning)]


def nic_ips(sched) -> dict:
    return {(h, l): f"127.{l + 1}.0.{i + 1}" for i, h in enumerate(sched.hosts) for l in range(sched.k + 1)}


def free_port(ips) -> int:
    """A port every NIC IP can listen on now (as run_host_bml binds it: SO_REUSEADDR)."""
    for _ in range(100):
        with socket.socket() as s:
            s.bind(("127.1.0.1", 0))
            port = s.getsockname()[1]
        try:
            for ip in ips:
                with socket.socket() as s:
                    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                    s.bind((ip, port))
                    s.listen()
            return port
        except OSError:
            continue
    raise RuntimeError("no port free on every loopback NIC address")


def run_all(sched, arrays: dict, timeout: float = 20.0, absent=(), **kw):
    """Run every host but `absent` as a thread; returns ({host: result}, {host: error})."""
    plan = plan_from_json(json.loads(json.dumps(plan_to_json(sched))))
    ips = nic_ips(sched)
    port = free_port(ips.values())
    results, errors = {}, {}

    def host(h):
        try:
            results[h] = run_host_bml(arrays[h], h, plan, ips, port=port, timeout=timeout, **kw)
        except Exception as e:  # noqa: BLE001 - reported per host below
            errors[h] = e

    threads = [threading.Thread(target=host, args=(h,), name=f"test-{h}") for h in sched.hosts if h not in absent]
    for t in threads:
        t.start()
    for t in threads:
        t.join(min(timeout, 50) + 10)
    assert not any(t.is_alive() for t in threads), "a host still runs (past its timeout, or blocked on a peer)"
    return results, errors


def test_plan_survives_json_and_bad_plans_are_rejected():
    sched = schedule(bcube(3, 1))
    d = json.loads(json.dumps(plan_to_json(sched)))
    plan = plan_from_json(d)
    assert (plan.n, plan.k, plan.levels, plan.hosts) == (3, 1, 2, sched.hosts)
    assert plan.stages == sched.stages
    for field, value in [(0, "h99"), (6, "max"), (5, 2), (3, 9)]:
        bad = json.loads(json.dumps(d))
        bad["stages"][1][0][field] = value
        with pytest.raises(ValueError, match="stage 1"):
            plan_from_json(bad)
    with pytest.raises(ValueError, match="format"):
        plan_from_json({**d, "format": "other"})


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("length", [0, 5, 37, 1001, 300_007])
def test_int32_is_exact_with_wraparound(shape, length):
    """Lengths are not multiples of N*L (5 < N*L leaves empty pieces); 300_007 makes
    pieces larger than one send. Values span int32, so the sum wraps."""
    sched = schedule(bcube(*shape))
    rng = np.random.default_rng(length)
    arrays = {h: rng.integers(-2 ** 31, 2 ** 31, size=length, dtype=np.int32) for h in sched.hosts}
    expected = np.sum(list(arrays.values()), axis=0, dtype=np.int32)
    if length > 100:
        assert (expected != np.sum(list(arrays.values()), axis=0, dtype=np.int64)).any()   # it did wrap
    simulated = simulate_bml(arrays, sched)
    results, errors = run_all(sched, arrays)
    assert not errors
    assert set(results) == set(sched.hosts)
    for h, r in results.items():
        assert r.dtype == np.int32 and r.shape == (length,)
        np.testing.assert_array_equal(r, expected, err_msg=h)
        np.testing.assert_array_equal(r, simulated[h], err_msg=h)


@pytest.mark.parametrize("shape", SHAPES)
def test_float32_within_the_documented_bound(shape):
    sched = schedule(bcube(*shape))
    n, levels = shape[0], shape[1] + 1
    rng = np.random.default_rng(7)
    arrays = {h: (rng.standard_normal(2023) * 10.0 ** rng.integers(-3, 4, 2023)).astype(np.float32)
              for h in sched.hosts}
    stacked = np.array(list(arrays.values()), dtype=np.float64)
    exact, magnitude = stacked.sum(axis=0), np.abs(stacked).sum(axis=0)   # float64: error ~1e-16 relative
    h, u = levels * (n - 1), 2.0 ** -24
    bound = h * u / (1 - h * u) * magnitude + 1e-12 * magnitude
    results, errors = run_all(sched, arrays)
    assert not errors
    simulated = simulate_bml(arrays, sched)
    first = results[sched.hosts[0]]
    assert (np.abs(first - exact) > 0).any(), "float32 rounding should show at these magnitudes"
    for host, r in results.items():
        assert r.dtype == np.float32
        assert (np.abs(r.astype(np.float64) - exact) <= bound).all(), host
        assert r.tobytes() == simulated[host].astype(np.float32).tobytes() == first.tobytes(), host


def test_stats_count_every_byte_sent():
    sched = schedule(bcube(3, 1))
    arrays = {h: np.arange(100, dtype=np.int32) for h in sched.hosts}
    results, errors = run_all(sched, arrays, return_stats=True)
    assert not errors
    pieces = [np.array_split(p, len(sched.hosts)) for p in np.array_split(np.arange(100), 2)]
    for h, (r, stats) in results.items():
        mine = [t for stage in sched.stages for t in stage if t.src == h]
        payload = 4 * sum(len(pieces[t.part][t.piece]) for t in mine)
        hellos = len({(t.dst, t.level) for t in mine}) * (HELLO.size + len(h))
        assert stats["payload_bytes_sent"] == payload
        assert stats["bytes_sent"] == payload + len(mine) * FRAME.size + hellos
        assert stats["bytes_sent"] == sum(stats["bytes_sent_by_level"])
        assert stats["connections"] == {"out": 4, "in": 4} and len(stats["stage_seconds"]) == 4


def test_a_peer_that_never_connects_is_named_within_the_timeout():
    sched = schedule(bcube(2, 1))
    arrays = {h: np.ones(50, dtype=np.int32) for h in sched.hosts}
    results, errors = run_all(sched, arrays, timeout=1.5, absent=("h3",))
    assert not results and set(errors) == set(sched.hosts) - {"h3"}
    for h, e in errors.items():
        assert isinstance(e, BmlHostError) and "stage 0" in str(e), (h, e)
    g = bcube(2, 1)
    neighbours = {h for sw in g.neighbors("h3") for h in g.neighbors(sw)} - {"h3"}
    assert neighbours and all("h3" in str(errors[h]) for h in neighbours)


def test_hosts_with_different_lengths_fail_fast_naming_peer_and_stage():
    """The first failure shuts the other transfers down: nobody waits for the deadline
    (no host's error is a time-out; a long timeout makes that outcome unambiguous)."""
    sched = schedule(bcube(2, 1))
    arrays = {h: np.ones(64 if h == "h1" else 60, dtype=np.int32) for h in sched.hosts}
    results, errors = run_all(sched, arrays, timeout=600.0)
    assert not results
    assert all(isinstance(e, BmlHostError) and "stage" in str(e) for e in errors.values())
    assert not [e for e in errors.values() if "timed out" in str(e)], errors
    mismatch = [(h, str(e)) for h, e in errors.items() if "bytes, expected" in str(e)]   # h1 or its peers see it
    assert mismatch and all("stage 0" in e and (h == "h1" or "from h1" in e) for h, e in mismatch), errors


def test_dtype_is_checked_before_any_socket():
    sched = schedule(bcube(2, 1))
    with pytest.raises(ValueError, match="int32 or float32"):
        run_host_bml(np.ones(8), "h1", sched, nic_ips(sched), port=1)   # port 1: never bound


def test_a_wrong_frame_stops_the_host_at_once_though_another_peer_hangs():
    """Fake h2 sends a stage-1 frame during stage 0 while fake h3 stays silent: h1 must
    report h2 at once (the frame check, then shutting down its other transfers)."""
    sched = schedule(bcube(3, 0))
    ips = nic_ips(sched)
    port = free_port(ips.values())
    fakes = [socket.create_server((ips[h, 0], port)) for h in ("h2", "h3")]
    errors = []

    def h1():
        try:
            run_host_bml(np.ones(30, dtype=np.int32), "h1", sched, ips, port=port, timeout=600.0)
        except BmlHostError as e:
            errors.append(e)

    worker = threading.Thread(target=h1)
    worker.start()
    try:
        for h in ("h2", "h3"):
            def connected(h=h):                           # until h1 listens
                try:
                    fakes.append(socket.create_connection((ips["h1", 0], port), source_address=(ips[h, 0], 0)))
                    return True
                except ConnectionRefusedError:
                    return False

            wait_until(connected, 60, "h1 to listen")
            fakes[-1].sendall(HELLO.pack(b"BMLh", 0, len(h)) + h.encode())
        t = next(t for t in sched.stages[0] if (t.src, t.dst) == ("h2", "h1"))
        fakes[2].sendall(FRAME.pack(b"BMLf", 1, t.part, t.piece, 1, 40) + bytes(40))   # 30/3 int32 = 40 bytes
        worker.join(60)                                   # the silent h3 would hold it 600 s
        stopped_by_the_frame = not worker.is_alive()
    finally:
        for s in fakes:
            s.close()
        worker.join(60)
    assert stopped_by_the_frame, "h1 waited for the silent peer instead of stopping at the bad frame"
    assert len(errors) == 1 and "stage 0" in str(errors[0]) and "from h2" in str(errors[0]) \
        and "got stage 1" in str(errors[0]), errors


def test_connections_opened_before_the_call_carry_it_and_are_reported_apart():
    """As a worker does before its start gate: every host opens its connections first (all
    at once), then runs the allreduce on them; the sum is exact, and the call reports the
    setup measured when the connections opened, not a second setup of its own."""
    sched = schedule(bcube(3, 1))
    plan = plan_from_json(json.loads(json.dumps(plan_to_json(sched))))
    ips = nic_ips(sched)
    port = free_port(ips.values())
    arrays = {h: np.full(1001, i + 1, dtype=np.int32) for i, h in enumerate(sched.hosts)}
    opened, results, errors = {}, {}, {}

    def connect(h):
        try:
            opened[h] = connect_host_bml(h, plan, ips, port=port, timeout=20.0)
        except Exception as e:  # noqa: BLE001 - reported below
            errors[h] = e

    threads = [threading.Thread(target=connect, args=(h,)) for h in sched.hosts]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not errors and set(opened) == set(sched.hosts), errors

    def run(h):
        results[h] = run_host_bml(arrays[h], h, plan, ips, port=port, timeout=20.0, return_stats=True,
                                  connected=opened[h])

    threads = [threading.Thread(target=run, args=(h,)) for h in sched.hosts]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert set(results) == set(sched.hosts)
    for h, (out, stats) in results.items():
        np.testing.assert_array_equal(out, np.full(1001, sum(range(1, 10)), dtype=np.int32), err_msg=h)
        assert stats["setup_seconds"] == opened[h].setup
        assert stats["connections"] == {"out": 4, "in": 4}
