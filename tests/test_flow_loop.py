"""hosts/flow_loop.py: one thread drives every flow of a worker, over real loopback TCP sockets."""

from __future__ import annotations

import os
import socket
import struct
import threading

import numpy as np
import pytest

from agglab.hosts import ps
from threads import on_threads
from agglab.hosts.diagnostics import AllreduceTimeout
from agglab.hosts.flow_loop import FlowLoop
from agglab.hosts.tcp_mesh import Mesh
from agglab.hosts.tcp_peer import Peer, PeerError

FRAME = struct.Struct(">II")        # the wire format, written out here: tag, byte count


def _pair(me: int, rank: int):
    """A Peer for this side and the raw socket of the other side (TCP over loopback)."""
    with socket.create_server(("127.0.0.1", 0)) as listener:
        a = socket.create_connection(listener.getsockname())
        b, _ = listener.accept()
    return Peer(a, me, rank, f"pair-{rank}", give_up=5.0), b


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        assert chunk, "closed early"
        buf += chunk
    return bytes(buf)


def test_a_receiver_that_reads_nothing_does_not_hold_up_another_flow():
    """8 MB queued to a peer that reads nothing (far more than its socket buffers hold) while
    a second peer gets its message and answers: the loop carries the second exchange through
    before the first peer drains a byte. A loop that wrote its flows in turn would block."""
    slow, slow_end = _pair(0, 1)
    fast, fast_end = _pair(0, 2)
    loop = FlowLoop(Mesh(out={1: slow}, inc={2: fast}), give_up=5.0, me=0)
    big = np.arange(2 * 1024 * 1024, dtype=np.int32)            # 8 MB
    small = np.array([7, 8, 9], dtype=np.int32)
    answer = np.zeros(3, dtype=np.int32)
    order = []
    fast_done, slow_may_read = threading.Event(), threading.Event()

    def fast_side():
        tag, n = FRAME.unpack(_recv_exact(fast_end, FRAME.size))
        payload = np.frombuffer(_recv_exact(fast_end, n), dtype=np.int32)
        fast_end.sendall(FRAME.pack(0, 12) + (payload * 2).tobytes())

    def slow_side():
        slow_may_read.wait(30)
        tag, n = FRAME.unpack(_recv_exact(slow_end, FRAME.size))
        order.append(("slow read", tag, n))
        got = np.frombuffer(_recv_exact(slow_end, n), dtype=np.int32)
        order.append(("slow ok", bool(np.array_equal(got, big))))

    def answered():
        order.append("fast answered")
        fast_done.set()
        slow_may_read.set()

    threads = [threading.Thread(target=f, daemon=True) for f in (fast_side, slow_side)]
    for t in threads:
        t.start()
    loop.send(slow, big)
    loop.send(fast, small)
    loop.expect(fast, answer, "the answer", answered)
    loop.run()
    for t in threads:
        t.join(30)
    assert order == ["fast answered", ("slow read", 0, big.nbytes), ("slow ok", True)]
    assert answer.tolist() == [14, 16, 18]
    assert (slow.sent, fast.sent, fast.received) == (1, 1, 1)
    assert slow.bytes_sent + fast.bytes_sent == big.nbytes + small.nbytes


def test_a_silent_peer_is_named_with_the_message_awaited():
    quiet, quiet_end = _pair(3, 5)
    loop = FlowLoop(Mesh(out={5: quiet}, inc={}), give_up=0.3, me=3)
    loop.expect(quiet, bytearray(4), "the sum of shard 5 chunk 0 [0:1]", lambda: None)
    with pytest.raises(AllreduceTimeout, match=r"rank 3: no data from rank 5 \(pair-5\) .*the sum of shard 5 chunk 0"):
        loop.run()
    quiet_end.close()


def test_a_message_out_of_step_is_refused_not_summed():
    peer, end = _pair(0, 1)
    end.sendall(FRAME.pack(1, 4) + b"\0\0\0\0")        # message 1 where message 0 is due
    loop = FlowLoop(Mesh(out={1: peer}, inc={}), give_up=5.0, me=0)
    loop.expect(peer, bytearray(4), "chunk 0", lambda: None)
    with pytest.raises(PeerError, match="sent message 1 of 4 bytes, expected message 0 of 4 bytes"):
        loop.run()


def test_a_peer_that_hangs_up_is_named():
    peer, end = _pair(0, 4)
    end.close()
    loop = FlowLoop(Mesh(out={}, inc={4: peer}), give_up=5.0, me=0)
    loop.expect(peer, bytearray(8), "shard 0 chunk 0", lambda: None)
    with pytest.raises(PeerError, match="rank 4 .* closed the connection while this worker waited for shard 0 chunk 0"):
        loop.run()


def test_a_ps_worker_starts_a_bounded_number_of_threads_whatever_the_job_size(monkeypatch):
    """12 workers in one process: each may start an acceptor and up to 11 connectors for its
    setup, then drives its 22 connections from its own thread: at most 12 x 12 threads, where
    a thread per flow would be 12 x 44 more."""
    from test_hosts_baselines import assert_exact, run_all

    started = []
    real_start = threading.Thread.start
    monkeypatch.setattr(threading.Thread, "start", lambda self: (started.append(self.name), real_start(self))[1])
    n = 12
    inputs = [np.full(5000, r + 1, dtype=np.int32) for r in range(n)]
    results = run_all("ps", inputs, chunk_bytes=1024)
    assert_exact(results, inputs)
    assert len(started) <= n + n * 12, started          # n: the test's own rank threads
    assert ps.threads_per_worker(n) == 13


def test_payload_bytes_are_reported_as_they_arrive_not_per_message():
    """A message sent in two halves: `on_bytes` hears the first half before the second is
    sent (the sender waits for that report, not for a time), and never the frame header."""
    peer, end = _pair(0, 1)
    heard, first_half = [], threading.Event()
    payload = np.arange(1000, dtype=np.int32).tobytes()            # 4,000 bytes

    def on_bytes(n):
        heard.append(n)
        first_half.set()

    def sender():
        end.sendall(FRAME.pack(0, len(payload)) + payload[:1500])
        first_half.wait(30)
        end.sendall(payload[1500:])

    t = threading.Thread(target=sender, daemon=True)
    t.start()
    out = bytearray(len(payload))
    loop = FlowLoop(Mesh(out={}, inc={1: peer}), give_up=5.0, me=0, on_bytes=on_bytes)
    loop.expect(peer, out, "one message", lambda: None)
    loop.run()
    t.join(30)
    assert bytes(out) == payload
    assert sum(heard) == 4000 and heard[0] <= 1500, heard


def test_a_ps_worker_reports_progress_in_the_bytes_it_receives():
    """Each of 4 workers receives its shard from the 3 others and the 3 other shards' sums:
    2 x 3/4 of 40,000 int32 = 240,000 bytes, reported rising to exactly that (not in
    messages: 6 per worker here)."""
    n, length = 4, 40_000
    reports = {r: [] for r in range(n)}
    inputs = [np.full(length, r, dtype=np.int32) for r in range(n)]
    port = 33_000 + os.getpid() % 1000

    def work(rank):
        return ps.allreduce(inputs[rank], rank=rank, peers=[f"127.0.0.{r + 1}" for r in range(n)], port=port,
                            give_up=20, on_progress=lambda d, t: reports[rank].append((d, t)))

    outs = on_threads(n, work)
    assert all(np.array_equal(o, np.full(length, 0 + 1 + 2 + 3, dtype=np.int32)) for o in outs)
    for rank, seen in reports.items():
        assert seen[-1] == (240_000, 240_000), (rank, seen[-1])
        assert all(a[0] < b[0] for a, b in zip(seen, seen[1:])), rank


def test_bytes_acked_counts_what_the_peer_acknowledged():
    """TCP_INFO's tcpi_bytes_acked read at its offset: the 100,000 bytes a peer has read
    are acknowledged (loopback ACKs them at once; the wait only guards a hang)."""
    from agglab.hosts import tcp_acked
    from agglab.testkit.waits import wait_until
    peer, end = _pair(0, 1)
    before = tcp_acked.bytes_acked(peer.sock)
    peer.sock.sendall(b"x" * 100_000)
    assert _recv_exact(end, 100_000) == b"x" * 100_000
    wait_until(lambda: tcp_acked.bytes_acked(peer.sock) - before >= 100_000, 10.0, "the peer's ACKs")
    assert tcp_acked.bytes_acked(peer.sock) - before < 100_200       # not some other counter
    assert tcp_acked.bytes_acked(socket.socket(socket.AF_UNIX)) is None
    end.close()


def test_a_full_socket_whose_bytes_are_still_acknowledged_is_not_a_stall(monkeypatch):
    """A flow with bytes queued that its socket has taken none of for longer than give_up,
    while the peer keeps acknowledging: a fair share of a slow link, not a stall. Once the
    acknowledgements stop too, the loop gives up naming the peer. Clock and ACK counter are
    scripted (no waiting)."""
    from agglab.hosts import flow_loop, tcp_acked
    peer, end = _pair(0, 1)
    acked = iter([5_000, 12_000, 12_000])
    monkeypatch.setattr(tcp_acked, "bytes_acked", lambda sock: next(acked))
    now = [1000.0]
    monkeypatch.setattr(flow_loop.time, "monotonic", lambda: now[0])
    loop = FlowLoop(Mesh(out={1: peer}, inc={}), give_up=2.0, me=0)     # the flow starts at 5,000 acked
    flow = loop.flows[id(peer)]
    flow.sendq.append(memoryview(b"queued"))
    now[0] += 2.5
    loop._check_stalls()                  # 12,000 acknowledged since: alive, its clock restarts
    assert flow.last_tx == now[0]
    now[0] += 2.5
    with pytest.raises(AllreduceTimeout, match=r"rank 0: rank 1 \(pair-1\) accepted no data for 2 s \(6 bytes queued\)"):
        loop._check_stalls()              # still 12,000: stalled
    end.close()


def test_a_flow_that_waits_is_not_a_stall_while_another_moves(monkeypatch):
    """Rank 0 waits for a shard's sum from rank 5 longer than give_up while its flow to rank 6
    keeps moving: the worker is not stuck (a PS's owner may be slow on a shared uplink). Once
    nothing has moved for give_up, it gives up naming the flow that waited longest. Clock
    scripted (no waiting)."""
    from agglab.hosts import flow_loop
    quiet, quiet_end = _pair(0, 5)
    busy, busy_end = _pair(0, 6)
    now = [500.0]
    monkeypatch.setattr(flow_loop.time, "monotonic", lambda: now[0])
    loop = FlowLoop(Mesh(out={5: quiet, 6: busy}, inc={}), give_up=2.0, me=0)
    loop.expect(quiet, bytearray(4), "the sum of shard 5 chunk 0", lambda: None)
    loop.expect(busy, bytearray(4), "the sum of shard 6 chunk 0", lambda: None)
    busy_flow = loop.flows[id(busy)]
    for _ in range(3):                     # 4.5 s in all, rank 6's bytes arriving all along
        now[0] += 1.5
        busy_flow.last_rx = now[0]
        loop._check_stalls()
        assert loop._wait() == pytest.approx(2.0)
    now[0] += 2.5                          # then nothing moves anywhere
    with pytest.raises(AllreduceTimeout, match=r"rank 0: no data from rank 5 \(pair-5\) for 2 s while receiving "
                                               r"the sum of shard 5 chunk 0"):
        loop._check_stalls()
    quiet_end.close()
    busy_end.close()
