"""Real UDP sockets (loopback) and the retransmission-timeout estimator.

Why: the in-process harness never touches `UdpTransport`; Mininet runs do.  A
tiny UDP aggregation service on 127.0.0.x (the software switch's pipeline behind a socket)
proves the agent works over real datagrams, on a free port so it cannot
collide with anything else on the machine.
"""

import contextlib
import socket
import threading

import numpy as np
import pytest

from agglab.testkit.fakenet import PayloadSwitch
from agglab.hosts.agent import allreduce
from agglab.hosts.rto import MAX_RTO, MIN_RTO, PEAK_HALF_LIFE, RtoEstimator
from agglab.hosts.transport import Transport, UdpTransport

SERVICE = "127.0.0.254"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind((SERVICE, 0))
        return s.getsockname()[1]


def serve(sock: socket.socket, n: int, stop: threading.Event) -> None:
    """Aggregation service: child = last octet - 1 of the source address."""
    switch, port = PayloadSwitch(n), sock.getsockname()[1]
    sock.settimeout(0.05)
    while not stop.is_set():
        try:
            payload, (ip, _) = sock.recvfrom(65535)
        except socket.timeout:
            continue
        for dest, res in switch.process(int(ip.rsplit(".", 1)[1]) - 1, payload):
            sock.sendto(res, (f"127.0.0.{dest + 1}", port))


def test_allreduce_over_loopback_udp():
    n, port = 3, free_port()
    svc = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    svc.bind((SERVICE, port))
    stop = threading.Event()
    server = threading.Thread(target=serve, args=(svc, n, stop), daemon=True)
    server.start()
    arrays = [np.random.default_rng(i).integers(-1000, 1000, 5000, dtype=np.int32) for i in range(n)]
    results = [None] * n
    transports = [UdpTransport(f"127.0.0.{i + 1}", SERVICE, port=port) for i in range(n)]
    assert all(isinstance(t, Transport) for t in transports)

    def work(i):
        try:
            results[i] = allreduce(arrays[i], transport=transports[i], rank=i, workers=n, give_up=10)
        except Exception as exc:
            results[i] = exc

    threads = [threading.Thread(target=work, args=(i,)) for i in range(n)]
    try:
        [t.start() for t in threads]
        [t.join(60) for t in threads]
    finally:
        stop.set()
        server.join(5)
        svc.close()
        [t.close() for t in transports]
    for r in results:
        assert isinstance(r, np.ndarray), r
        assert np.array_equal(r, np.sum(arrays, axis=0, dtype=np.int32))


def test_udp_recv_timeout_and_bind_error():
    port = free_port()
    with UdpTransport("127.0.0.1", SERVICE, port=port) as t:
        assert t.recv(0) is None and t.recv(0.01) is None
        with pytest.raises(OSError, match="cannot bind UDP 127.0.0.1"):
            UdpTransport("127.0.0.1", SERVICE, port=port)


def test_rto_estimator():
    r = RtoEstimator(0.02)
    assert r.rto == 0.02
    r.sample(0.010, now=0.0)               # first sample: SRTT = R, RTTVAR = R/2, RTO = 3R
    assert r.rto == pytest.approx(0.030)
    for i in range(200):                    # steady 1 ms: RTO shrinks, but not below the peak hold
        r.sample(0.001, now=0.001 * i)
    assert r.rto >= 1.25 * 0.010 * 0.5 ** (0.2 / PEAK_HALF_LIFE) * 0.99
    for i in range(200):                    # long after the peak, it decays to the floor
        r.sample(0.0001, now=10.0 + 0.001 * i)
    assert r.rto == MIN_RTO
    r.sample(50.0, now=20.0)
    assert r.rto == MAX_RTO


@contextlib.contextmanager
def service_and_transport():
    """(a socket standing in for the aggregation service, a transport sending to it)."""
    port = free_port()
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as svc:
        svc.bind((SERVICE, port))
        svc.settimeout(2.0)
        svc.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
        yield svc, UdpTransport("127.0.0.1", SERVICE, port=port)


def test_staged_payloads_leave_in_order_before_recv_waits_and_on_close():
    with service_and_transport() as (svc, t):
        for i in range(100):                          # more than one batch
            t.send(i.to_bytes(2, "big") * 5)
        assert t.recv(0.0) is None                    # nothing came back, but the rest went out
        assert [svc.recv(64) for _ in range(100)] == [i.to_bytes(2, "big") * 5 for i in range(100)]
        t.send(b"last")                               # staged after the last recv ...
        t.close()                                     # ... leaves on close
        assert svc.recv(64) == b"last"


def test_a_burst_is_handed_out_one_payload_per_recv_in_order():
    port = free_port()
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as svc, \
            UdpTransport("127.0.0.1", SERVICE, port=port) as t:
        svc.bind((SERVICE, port))
        for i in range(150):
            svc.sendto(b"r%d" % i, ("127.0.0.1", port))
        got = []
        while (p := t.recv(0.5)) is not None:
            got.append(p)
        assert got == [b"r%d" % i for i in range(150)]


def test_recv_batch_hands_out_every_waiting_payload_in_order():
    port = free_port()
    t = UdpTransport("127.0.0.1", SERVICE, port=port)
    peer = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    peer.bind((SERVICE, port))
    try:
        sent = [bytes([i]) * (10 + i) for i in range(5)]
        for p in sent[:3]:
            peer.sendto(p, ("127.0.0.1", port))
        assert t.recv(5.0) == sent[0]                 # one taken singly: the rest still come
        rows, lens = t.recv_batch(5.0)
        got = [rows[i, :lens[i]].tobytes() for i in range(len(rows))]
        for p in sent[3:]:
            peer.sendto(p, ("127.0.0.1", port))
        while len(got) < len(sent) - 1:
            rows, lens = t.recv_batch(5.0)
            got += [rows[i, :lens[i]].tobytes() for i in range(len(rows))]
        assert got == sent[1:]
        assert t.recv_batch(0.0) is None
    finally:
        t.close()
        peer.close()


class _FakeClock:
    """monotonic() and sleep() for agglab.hosts.transport: sleeping moves the clock, nothing waits;
    with `late`, every sleep overruns by up to that many seconds (a process not running)."""

    def __init__(self, late: float = 0.0):
        self.now, self.late = 1000.0, late
        self.rng = np.random.default_rng(7)

    def monotonic(self):
        return self.now

    def sleep(self, seconds):
        self.now += max(seconds, 1e-6) + self.rng.uniform(0, self.late)


@pytest.mark.parametrize("late", [0.0, 0.004])
def test_a_paced_transport_never_hands_the_link_more_than_its_bucket_and_keeps_order(monkeypatch, late):
    """What pacing promises the link (ground/links.py): at no moment has the host handed its
    htb class more bytes than a token bucket of the link's cburst, refilled at the link rate,
    holds; so htb never has to hold a frame back. The bucket here is the test's own model of
    htb (6,000 bytes at 5 Mb/s: the cburst floor), not the transport's."""
    from agglab.hosts import transport as transport_module

    clock = _FakeClock(late)
    monkeypatch.setattr(transport_module, "time", clock)
    mbps, bucket = 5.0, 6000.0
    rate = mbps * 1e6 / 8                                      # bytes per second
    with service_and_transport() as (svc, t):
        t.pace(mbps)
        tokens, last, handed = bucket, clock.now, []
        send = t._tx.send

        def metered(fd, end, start):
            nonlocal tokens, last
            tokens = min(bucket, tokens + (clock.now - last) * rate)
            last = clock.now
            n = send(fd, end, start)
            for i in range(start, start + n):
                tokens -= t._tx.iov_len[2 * i + 1] + 42          # + Ethernet, IPv4, UDP headers
                assert tokens >= 0, "the paced burst overran the link's bucket"
            handed.append(n)
            return n

        t._tx.send = metered
        t._native = False              # the metered Python call, not the C extension's sendmmsg
        sizes = [100 + (i * 37) % 900 for i in range(300)]     # more than the 256-frame ring
        payloads = [i.to_bytes(2, "big") * (sizes[i] // 2) for i in range(300)]
        start = clock.now
        for p in payloads:
            t.send(p)
        assert t.held_back() is not None               # the link could not take them all yet
        t.drain()
        wire_time = sum(len(p) + 42 for p in payloads) / rate
        # the link's rate is kept on average too (the bucket allows at most one bucket early)
        assert clock.now - start >= wire_time - bucket / rate
        # and loses no link time, even woken up to 4 ms late (it catches up within the bucket)
        assert clock.now - start <= wire_time / 0.95
        # frames left in bursts, not one per call
        assert sum(handed) == len(payloads) and len(handed) < len(payloads) / 3
        t.close()
        assert [svc.recv(2048) for _ in payloads] == payloads


def _first_burst(t, clock, payloads: int, size: int) -> int:
    """Stage `payloads` payloads of `size` bytes, flush once: the wire bytes handed to the link."""
    handed = []
    send = t._tx.send

    def counted(fd, end, start):
        n = send(fd, end, start)
        handed.extend(t._tx.iov_len[2 * i + 1] + 42 for i in range(start, start + n))
        return n

    t._tx.send, t._native = counted, False
    for i in range(payloads):
        t.send(bytes([i]) * size)
    t.flush()
    t._tx.send = send
    return sum(handed)


def test_a_paced_transport_hands_an_idle_link_its_whole_bucket_at_once(monkeypatch):
    """After an idle of a whole bucket's time htb's bucket is full (6,000 bytes at 5 Mb/s), and
    the pacer hands it all but at most one frame of it at once: a sparse call's 16 lead frames
    leave together. After a shorter idle only what the bucket surely holds again (three quarters
    of it, ground/links.py), as before."""
    from agglab.hosts import transport as transport_module

    clock = _FakeClock()
    monkeypatch.setattr(transport_module, "time", clock)
    bucket, frame = 6000, 272 + 42                              # a K=64 aggregation frame
    with service_and_transport() as (svc, t):
        t.pace(5.0)
        first = _first_burst(t, clock, 40, 272)
        assert bucket - frame < first <= bucket
        t.drain()                                               # the rest leaves, paced
        clock.now += 0.005                                      # idle: half a bucket's time
        again = _first_burst(t, clock, 40, 272)
        assert again <= 0.75 * bucket + frame
        t.drain()
        clock.now += 0.0150                  # idle: more than a bucket's time after what drain booked
        assert bucket - frame < _first_burst(t, clock, 40, 272) <= bucket
        t.close()
        assert len([svc.recv(2048) for _ in range(120)]) == 120


def test_an_unpaced_transport_holds_nothing_back():
    with service_and_transport() as (svc, t):
        t.pace(20.0)
        t.pace(None)                                   # switched off again
        for i in range(70):
            t.send(b"%d" % i)
        assert t.held_back() is None
        t.flush()
        assert [svc.recv(64) for _ in range(70)] == [b"%d" % i for i in range(70)]
        t.close()


def test_a_socket_above_fd_setsize_still_waits_for_the_pacer():
    """A worker in a large Mininet network starts with more than 1024 descriptors (a node's
    shell inherits the builder's): select() refuses such a socket, so the pacer's wait polls."""
    import os
    import select

    from agglab.hosts.transport import FD_SETSIZE

    port = free_port()
    filler = []
    try:
        while len(filler) < FD_SETSIZE + 8 and (not filler or filler[-1] < FD_SETSIZE):
            filler.append(os.open(os.devnull, os.O_RDONLY))
        with UdpTransport("127.0.0.1", SERVICE, port=port) as t:
            fd = t.sock.fileno()
            assert fd >= FD_SETSIZE
            with pytest.raises(ValueError, match="filedescriptor out of range in select"):
                select.select((fd,), (), (), 0)
            assert not t._readable(fd, 0.01)
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
                s.sendto(b"x" * 8, ("127.0.0.1", port))
            assert t._readable(fd, 1.0)
    finally:
        for f in filler:
            os.close(f)
