"""Every scheme's retransmission timers from the rates of the links its packets cross.

Why: at 128 workers a window queued at a slow link outlasts a timer set for fast paths, and
every slot (or block) is resent behind itself (a storm that never ends). The dense and
sparse agents floor their timers at each tree's slowest link (hosts/slots.py path_rates),
ATP's workers at their path's (hosts/schemes/atp.py path_floor), from the epoch file the
controller writes. The ring and the PS are TCP: the kernel times them, and the session
already floors TCP's RTO at each host route's link rate (ground/links.py rto_min_ms, set by
emulation/host_setup.py), so they are not here.

Every expected figure is worked out by hand in the test: a full agg frame is 314 bytes
(14 Ethernet + 20 IPv4 + 8 UDP + 16 agg_h + 64 x 4 value bytes), 2,512 bits.
"""

from __future__ import annotations

import json
import random
import socket
import threading

import numpy as np
import pytest

from agglab.controller import forward, topologies
from agglab.controller.addressing import assign_addresses
from agglab.controller.schemes.atp import AtpJob
from agglab.controller.topology import switches, workers as worker_hosts
from agglab.ground import wire
from agglab.hosts.agent import DenseRun
from agglab.hosts.protocol import decode, encode
from agglab.hosts.rto import MAX_RTO, MIN_RTO
from agglab.hosts.schemes import atp
from agglab.hosts.sparse_agent import SparseRun
from agglab.testkit.treenet import PipeClient

FRAME_BITS = 314 * 8


def test_the_frame_the_hand_figures_count_is_the_wire_s():
    assert wire.FRAME_BYTES * 8 == FRAME_BITS


class _Unused:
    """A transport the constructors keep but these tests never send on."""

    def send(self, payload: bytes) -> None:
        raise AssertionError("no packet is sent here")

    def recv(self, timeout: float) -> None:
        return None


def _dense(window: int, tree_of_slot=None, link_mbps=None) -> DenseRun:
    arr = np.zeros(window * wire.K * 2, dtype=np.int32)
    return DenseRun(arr, _Unused(), 0, 4, 0, 0, 0, window, 0.02, 10.0, tree_of_slot, None, None, link_mbps)


def _sparse(window: int, tree_of_slot=None, link_mbps=None) -> SparseRun:
    arr = np.zeros(window * wire.K * 2, dtype=np.int32)
    return SparseRun(arr, _Unused(), 0, 4, 0, 0, 0, window, 0.02, 10.0, tree_of_slot, None, None,
                     wire.K, 1, False, link_mbps)


@pytest.mark.parametrize("make", [_dense, _sparse], ids=["switchml", "omnireduce"])
def test_one_tree_s_timer_outlasts_its_window_there_and_back(make):
    """16 slots on tree 0, whose slowest link runs at 0.1 Mb/s: 16 frames up and 16 results
    down queue there, 32 x 2,512 bits / 100,000 b/s = 0.80384 s; the cap is twice that."""
    run = make(16)
    assert run.rtt.rto < 0.1                               # a fast path's timer before it knows
    run.path_rates({"0": 0.1})
    assert run.rtt.floor == pytest.approx(0.80384)
    assert run.rtt.rto == pytest.approx(0.80384)
    assert run.rtt.cap == pytest.approx(1.60768)


@pytest.mark.parametrize("make", [_dense, _sparse], ids=["switchml", "omnireduce"])
def test_the_floor_is_the_slowest_tree_s_queue_of_its_own_slots(make):
    """16 slots alternating over trees 0 and 1 (8 each). Tree 0 at 1 Mb/s: 16 x 2,512 bits /
    1e6 = 40.192 ms; tree 1 at 0.5 Mb/s: 16 x 2,512 / 500,000 = 80.384 ms, the floor. A
    floor under half of MAX_RTO leaves the cap at MAX_RTO."""
    run = make(16, [0, 1] * 8)
    run.path_rates({"0": 1.0, "1": 0.5})
    assert run.rtt.floor == pytest.approx(0.080384)
    assert run.rtt.cap == MAX_RTO


@pytest.mark.parametrize("make", [_dense, _sparse], ids=["switchml", "omnireduce"])
def test_the_host_s_own_link_queues_the_whole_window_s_results(make):
    """16 slots over 4 trees (4 each), every tree's slowest link at 0.075 Mb/s: per tree 8
    frames, 8 x 2,512 / 75,000 = 0.26795 s; but all 16 results come down the host's own
    0.075 Mb/s link, 16 x 2,512 / 75,000 = 0.53589 s: the floor, the cap twice that."""
    run = make(16, [0, 1, 2, 3] * 4, link_mbps=0.075)
    run.path_rates({str(t): 0.075 for t in range(4)})
    assert run.rtt.floor == pytest.approx(0.535893, rel=1e-5)
    assert run.rtt.cap == pytest.approx(1.071787, rel=1e-5)
    alone = make(16, [0, 1, 2, 3] * 4, link_mbps=0.075)
    alone.path_rates(None)                                 # no tree rates known: the host link still counts
    assert alone.rtt.floor == pytest.approx(0.535893, rel=1e-5)


@pytest.mark.parametrize("make", [_dense, _sparse], ids=["switchml", "omnireduce"])
def test_unshaped_trees_leave_the_timer_alone(make):
    run = make(16)
    run.path_rates(None)
    run.path_rates({})
    assert run.rtt.floor == MIN_RTO


def test_atp_s_floor_counts_the_window_up_and_its_results_to_every_worker():
    """32 workers, 16 blocks out, 0.1 Mb/s: 16 frames up and 16 x 31 results down, 512 x
    2,512 bits / 100,000 b/s = 12.86144 s; 2 workers, 4 blocks, 5 Mb/s: 8 x 2,512 / 5e6 =
    4.0192 ms."""
    assert atp.path_floor(16, 32, 0.1) == pytest.approx(12.86144)
    assert atp.path_floor(4, 2, 5.0) == pytest.approx(0.0040192)


def _one_block_against_an_echoing_ps(path_mbps):
    """A worker (rank 1 of 2) sends one block to a PS socket that answers it at once; the
    worker's stats. Window 4 (its maximum): the delay window sits at 4 blocks."""
    ip = f"127.0.{random.randrange(2, 200)}."
    peers = [ip + "1", ip + "2"]
    ps = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    ps.bind((peers[0], wire.UDP_PORT))
    ps.settimeout(10.0)
    worker = atp.AtpEndpoint(peers[1], peers, 1, job=3)
    got: dict = {}
    t = threading.Thread(target=lambda: got.update(out=worker.work(np.full((1, wire.K), 5, dtype=np.int32), 4,
                                                                      give_up=10.0, path_mbps=path_mbps)))
    t.start()
    try:
        while True:                                    # the block, then the FIN, answered both
            hdr, vals = decode(ps.recv(2048))
            ps.sendto(encode({**hdr, "flags": atp.FLAG_ATP | wire.FLAG_RESULT, "next_block": 0b11}, vals),
                      (peers[1], wire.UDP_PORT))
            if hdr["block"] & atp.FIN_BLOCK == atp.FIN_BLOCK:
                break
        t.join(10)
        assert not t.is_alive()
        return got["out"]
    finally:
        ps.close()
        worker.close()


def test_an_atp_worker_floors_its_timer_at_its_path_s_rate():
    """2 workers, window 4, path 0.5 Mb/s: 8 x 2,512 bits / 500,000 b/s = 40.192 ms; without
    a rate (unshaped) no floor."""
    out, stats = _one_block_against_an_echoing_ps(0.5)
    assert (out == 5).all()
    assert stats["rto_floor_ms"] == pytest.approx(40.192)
    assert _one_block_against_an_echoing_ps(None)[1]["rto_floor_ms"] is None


def test_the_atp_job_publishes_its_routes_slowest_link_before_and_after_a_reroute(tmp_path):
    """The workers read their path's rate from the epoch file (tree_mbps {0: ...}): the
    slowest shaped link the job's routes cross, again after a reroute moves them."""
    g = assign_addresses(topologies.build("fattree", k=4, workers=8))
    for u, v in g.edges:
        g.edges[u, v]["bw"] = 10.0
    clients = {sw: PipeClient(sw) for sw in switches(g)}
    for sw in switches(g):
        forward.install_forwarding(clients[sw], g, sw)
    epoch_file = tmp_path / "epoch.json"
    job = AtpJob(g, clients, worker_hosts(g), 16, epoch_file).start()
    assert json.loads(epoch_file.read_text())["tree_mbps"] == {"0": 10.0}
    a, b = sorted(e for e in job.trees().edges if {g.nodes[n]["kind"] for n in e} == {"switch"})[0]
    g.edges[a, b]["bw"] = 2.5                              # one link the routes cross, slower
    job.publish_rates()
    assert json.loads(epoch_file.read_text())["tree_mbps"] == {"0": 2.5}
    job.link_changed(a, b, False, 0.0)                     # the routes leave it
    after = json.loads(epoch_file.read_text())
    assert after["epoch"] == 1 and after["tree_mbps"] == {"0": 10.0}


def test_unshaped_atp_routes_write_no_rates(tmp_path):
    g = assign_addresses(topologies.build("fattree", k=4, workers=8))
    clients = {sw: PipeClient(sw) for sw in switches(g)}
    for sw in switches(g):
        forward.install_forwarding(clients[sw], g, sw)
    AtpJob(g, clients, worker_hosts(g), 16, tmp_path / "epoch.json").start()
    assert not (tmp_path / "epoch.json").exists()
