"""ground/mmsg.py: many datagrams per system call, with recv/send's per-datagram semantics."""

from __future__ import annotations

import errno
import socket

import pytest

from agglab.ground import mmsg

pytestmark = pytest.mark.skipif(not mmsg.AVAILABLE, reason="recvmmsg/sendmmsg need 64-bit Linux")


@pytest.fixture
def udp_pair():
    a = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    b = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    a.bind(("127.0.0.1", 0))
    b.bind(("127.0.0.1", 0))
    a.connect(b.getsockname())
    b.setblocking(False)
    yield a, b
    a.close()
    b.close()


def test_a_batch_goes_out_and_comes_back_in_order(udp_pair):
    a, b = udp_pair
    payloads = [bytes([i]) * (1 + i * 7) for i in range(40)]
    tx = mmsg.MsgBatch(64, 512, fd=a.fileno())
    for i, p in enumerate(payloads):
        tx.put(i, p)
    assert tx.send(tx.fd, len(payloads)) == len(payloads) and tx.errno == 0
    rx = mmsg.MsgBatch(16, 512)
    got = []
    while len(got) < len(payloads):
        n = rx.recv(b.fileno())
        assert n, f"only {len(got)} of {len(payloads)} datagrams arrived"
        got += [rx.frame(i) for i in range(n)]
        assert all(rx.length(i) == len(got[len(got) - n + i]) for i in range(n))
    assert got == payloads
    assert rx.recv(b.fileno()) == 0                      # nothing left: 0, not an exception


def test_a_refused_datagram_stops_the_batch_and_says_why(udp_pair):
    a, b = udp_pair
    tx = mmsg.MsgBatch(4, 70000, fd=a.fileno())
    tx.put(0, b"first")
    tx.put(1, b"x" * 66000)                              # larger than any UDP datagram
    tx.put(2, b"third")
    assert tx.send(tx.fd, 3) == 1                         # the first went, the second stopped it
    assert tx.send(tx.fd, 3, first=1) == 0 and tx.errno == errno.EMSGSIZE
    assert tx.send(tx.fd, 3, first=2) == 1
    rx = mmsg.MsgBatch(4, 128)
    assert rx.recv(b.fileno()) == 2
    assert [rx.frame(0), rx.frame(1)] == [b"first", b"third"]


def test_a_datagram_longer_than_its_slot_is_flagged_truncated(udp_pair):
    a, b = udp_pair
    a.send(b"y" * 300)
    rx = mmsg.MsgBatch(2, 100)
    assert rx.recv(b.fileno()) == 1
    assert rx.truncated(0) and rx.frame(0) == b"y" * 100


def test_receiving_on_a_closed_descriptor_raises():
    rx = mmsg.MsgBatch(2, 100)
    with pytest.raises(OSError, match="Bad file descriptor") as info:
        rx.recv(10_000)
    assert info.value.errno == errno.EBADF
