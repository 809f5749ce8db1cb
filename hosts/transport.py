"""How an agent moves UDP payloads: the `Transport` protocol and its UDP implementation.

Why an abstraction: the same worker code must run over a real socket inside a
Mininet host, and over an in-process harness (agglab/testkit/fakenet.py) that feeds the
software switch directly.  The agent only ever sends and receives whole UDP
payloads (agg_h + values), so that is all a transport has to do.
"""

from __future__ import annotations

import atexit
import errno
import math
import os
import select
import socket
import time
import weakref
from collections import deque
from typing import Protocol, runtime_checkable

import numpy as np

from agglab.ground import links, mmsg, wire
from agglab.hosts import native

BUFFER_BYTES = 16 * 1024 * 1024   # the kernel caps this at net.core.{r,w}mem_max
RECV_BYTES = 4096                 # payloads are wire.PAYLOAD_BYTES; more is foreign
FD_SETSIZE = 1024                 # select() takes no descriptor at or above this (glibc)


@runtime_checkable
class Transport(Protocol):
    def send(self, payload: bytes) -> None:
        """Send one UDP payload to the aggregation service (never blocks for long)."""

    def recv(self, timeout: float) -> bytes | None:
        """Next UDP payload addressed to this worker, or None after `timeout` seconds (0 = poll)."""


def batches(transport) -> "BatchTransport":
    """`transport` itself if it moves whole batches (UdpTransport), else a BatchTransport
    around its one-payload calls (the in-process harnesses of the tests)."""
    return transport if hasattr(transport, "recv_batch") else BatchTransport(transport)


class BatchTransport:
    """Batches over any `Transport`: what the agents' loop uses (hosts/slots.py).

    `recv_batch(timeout)` -> (rows, lens) or None: payload i is rows[i, :lens[i]], the
    rows valid until the next call.
    Why batches: an agent handles a burst of results in a few numpy calls instead of a
    few dozen Python operations per packet (hosts/agent.py); this class gives transports
    that only know one payload at a time the same interface."""

    BATCH = 64

    def __init__(self, transport) -> None:
        self.inner = transport
        self._rows = np.zeros((self.BATCH, RECV_BYTES), np.uint8)
        self._lens = np.zeros(self.BATCH, np.int64)

    def recv_batch(self, timeout: float):
        p = self.inner.recv(timeout)
        n = 0
        while p is not None:
            size = min(len(p), RECV_BYTES)
            self._rows[n, :size] = np.frombuffer(p, np.uint8, size)
            self._lens[n] = len(p)
            n += 1
            p = self.inner.recv(0.0) if n < self.BATCH else None
        return (self._rows[:n], self._lens[:n]) if n else None

    def send(self, payload: bytes) -> None:
        self.inner.send(payload)

    def flush(self) -> None:
        flush = getattr(self.inner, "flush", None)
        if flush is not None:
            flush()

    def held_back(self) -> None:
        """Nothing is ever held back here (no pacing): see UdpTransport.held_back."""
        return None


_OPEN: "weakref.WeakSet[UdpTransport]" = weakref.WeakSet()


@atexit.register
def _flush_open_transports() -> None:
    """A worker process that never closes its transport still sends what it staged."""
    for t in list(_OPEN):
        try:
            t.close()
        except OSError:
            pass


class UdpTransport:
    """One UDP socket bound to (local_ip, AGG_UDP_PORT), sending to (service_ip, AGG_UDP_PORT).

    Large socket buffers matter: a window of S slots means S packets can arrive
    back to back (one multicast burst per completed slot), and a dropped result
    costs a full retransmission timeout.

    Batched (ground/mmsg.py) where the platform allows: `recv` takes every waiting
    payload with one recvmmsg and hands them out one per call; `send` only stages a
    payload, and the staged ones leave with one sendmmsg when `recv` has nothing
    buffered any more (so before it would wait or ask the kernel), when BATCH are staged,
    or on `flush`/`close`. An agent answers a whole burst of results with one system
    call each way; as every agent loop calls `recv` after sending, nothing waits longer
    than the handling of the burst in hand. What an agent stages after its last `recv`
    (an acknowledgement of the final result) leaves when the allreduce returns
    (hosts/slots.py flushes), else on `close` or at interpreter exit.

    Paced (`pace`, which the agents call with their link's rate): staged payloads leave no
    faster than the link takes them, the others wait in the send ring; `recv` and
    `recv_batch` wake up early to send them, and `held_back` says when the next may go.
    """

    BATCH = 64           # unpaced, staged payloads leave once this many are waiting
    RING = 256           # payloads the send ring holds (paced: those the link can't take yet)

    def __init__(self, local_ip: str, service_ip: str, port: int = wire.UDP_PORT,
                 buffer_bytes: int = BUFFER_BYTES, device: str | None = None) -> None:
        """`device` pins the socket to one NIC (multi-NIC BCube servers: NIC l = level l)."""
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            for opt in (socket.SO_RCVBUF, socket.SO_SNDBUF):
                self.sock.setsockopt(socket.SOL_SOCKET, opt, buffer_bytes)
            if device:
                self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_BINDTODEVICE, device.encode())
            self.sock.bind((local_ip, port))
        except OSError as exc:
            self.sock.close()
            raise OSError(exc.errno, f"cannot bind UDP {local_ip}:{port} for aggregation: {exc.strerror}") from exc
        self.dest = (service_ip, port)
        self._timeout: float | None = None
        self.send_errors = 0          # sends refused by the kernel (link down): counted as loss
        self._head = self._tail = 0   # the send ring: payloads _head.._tail-1 are staged
        self._byte_time = 0.0         # seconds per wire byte at the pacing rate; 0 = no pacing
        self._horizon = self._top_up = 0.0   # book the link this far ahead, once this is left,
        self._catch_up = 0.0                 # and at most this far in the past (ground/links.py)
        self._free_at = 0.0           # when the paced link has sent everything handed to the kernel
        self._largest = 0             # the largest payload staged so far (the full bucket's margin)
        self._received: deque[bytes] = deque()
        if mmsg.AVAILABLE:
            self.sock.setblocking(False)
            self._tx = mmsg.MsgBatch(self.RING, RECV_BYTES, fd=self.sock.fileno(), dest=self.dest)
            self._rx = mmsg.MsgBatch(self.BATCH, RECV_BYTES)
            self._poll = select.poll()
            self._poll.register(self.sock, select.POLLIN)
            _OPEN.add(self)
        else:
            self._tx = self._rx = None
        # the system calls without ctypes where the C extension is built (hosts/native.py):
        # its argument conversion cost about as much as the call at a payload per wake-up
        self._native = native.enabled() and self._tx is not None
        # batches from the one-payload calls: no recvmmsg here, or some payloads were taken out
        # one by one already (a proxy: the fallback must not keep the transport alive)
        self._fallback = BatchTransport(weakref.proxy(self))

    def send(self, payload: bytes) -> None:
        """A down link (ENETUNREACH, ENETDOWN) or a full queue (ENOBUFS) is packet loss:
        the retransmission timer recovers, or the controller reports a partition."""
        if self._tx is None or len(payload) > RECV_BYTES:
            self.drain()                # in order: what is staged goes first
            try:
                self.sock.sendto(payload, self.dest)
            except OSError as exc:
                self._refused(exc.errno, exc)
            return
        if self._tail - self._head == self.RING:
            self._wait_out(self.RING - 1)
        i = self._tail % self.RING      # MsgBatch.put, inlined: once per packet
        start = i * self._tx.slot
        self._tx.view[start:start + len(payload)] = payload
        self._tx.iov_len[2 * i + 1] = len(payload)
        self._tail += 1
        if len(payload) > self._largest:
            self._largest = len(payload)
        if self._tail - self._head >= self.BATCH and not self._byte_time:
            self.flush()

    def pace(self, mbps: float | None) -> None:
        """Hand the kernel no more than a `mbps` link can send, like a NIC that paces its
        transmit queue (ground/links.py: the share of the rate and the burst); None or 0
        switches pacing off.

        Why: the host's link is a tc htb class. A sender that hands it a whole window at
        once keeps a standing queue there, and htb then releases every frame from its own
        timer: one timer interrupt, softirq and wake-up per frame and link, which at 20 Mb/s
        made the CPU, not the links, the bottleneck (1.61x the wire time, bottleneck link 64% busy). Paced a little under the
        link rate, frames find htb's bucket full and pass straight through in the sending
        call; they wait here instead, and leave in bursts that fit the bucket."""
        if mbps:
            self._byte_time, self._horizon, self._top_up, self._catch_up = links.pacing(mbps)
        else:
            self._byte_time = 0.0

    def flush(self) -> None:
        """Send the staged payloads in order (paced: as many as the link's budget allows,
        the rest at a later flush); a refused one is lost alone."""
        head, tail, ring = self._head, self._tail, self.RING
        if head == tail:
            return
        limit = self._paced_limit(head, tail) if self._byte_time else tail
        while head < limit:                 # one sendmmsg per contiguous run of the ring
            start = head % ring
            end = min(start + limit - head, ring)
            if self._native:
                sent = native.sendmmsg(self._tx.fd, self._tx._hdr_at + start * mmsg._MMSG, end - start)
                sent, err = (sent, 0) if sent >= 0 else (0, -sent)
            else:
                sent = self._tx.send(self._tx.fd, end, start)
                err = self._tx.errno
            head += sent
            if start + sent < end:
                if err not in (0, errno.EAGAIN):
                    self._refused(err, None)
                else:
                    self.send_errors += 1
                head += 1
        self._head = head

    def _paced_limit(self, head: int, tail: int) -> int:
        """How far the staged payloads head..tail-1 may leave now: each books its wire time
        on the paced link, booked at most `_horizon` ahead, and only once less than `_top_up`
        is left (so a backlog leaves in a few large calls, not one by one); after a late
        wake-up, from at most `_catch_up` in the past (the link's bucket refilled meanwhile).

        After an idle of a whole bucket's time (a call's first frames: the link was idle at
        the start gate) htb's bucket is full whatever went before, so the booking starts a
        whole bucket less the horizon and one frame in the past (ground/links.py `pacing`):
        the link is handed its whole bucket at once. Why: booked from a quarter of a bucket in
        the past, the bucket never fell below about a quarter full during a backlogged call
        (1.3-1.7 of 6 KB at 5 Mb/s), link time the wire time counts (emulation/wire_model.py:
        the busiest link's bytes less its full bucket), and a call's 16th lead frame waited
        3.4 ms for the pacer (docs/measurements.md, 2026-12-07, eighth session)."""
        now = time.monotonic()
        if self._free_at - now > self._top_up:
            return head
        byte_time, offset = self._byte_time, wire.AGG_OFFSET
        if now - self._free_at >= 2 * self._horizon:
            free = now - max(0.0, self._horizon - (self._largest + offset) * byte_time)
        else:
            free = max(self._free_at, now - self._catch_up)
        horizon = now + self._horizon
        lengths, ring, i = self._tx.iov_len, self.RING, head
        while i < tail and free <= horizon:
            free += (lengths[2 * (i % ring) + 1] + offset) * byte_time
            i += 1
        self._free_at = free
        return i

    def held_back(self) -> float | None:
        """Seconds until the pacer lets the next staged payload go (None: none is held)."""
        if self._head == self._tail or not self._byte_time:
            return None
        return max(0.0, self._free_at - self._top_up - time.monotonic())

    def _wait_out(self, keep: int) -> None:
        """Send, waiting for the pacer, until at most `keep` payloads are staged: `keep` below
        RING when the ring is full (a full NIC queue blocks its sender), 0 to drain."""
        self.flush()
        while self._tail - self._head > keep:
            time.sleep(self.held_back() or 0.0)
            self.flush()

    def drain(self) -> None:
        """Send everything staged, waiting for the pacer where it holds payloads back."""
        self._wait_out(0)

    def _refused(self, err: int, exc: OSError | None) -> None:
        if err not in (errno.ENETUNREACH, errno.ENETDOWN, errno.EHOSTUNREACH, errno.ENOBUFS):
            raise exc or OSError(err, os.strerror(err))
        self.send_errors += 1

    def recv(self, timeout: float) -> bytes | None:
        if self._received:
            return self._received.popleft()
        if self._rx is None:
            return self._recv_one(timeout)
        n = self._receive(timeout)
        if not n:
            return None
        frame = self._rx.frame
        self._received.extend(frame(i) for i in range(1, n))
        return frame(0)

    def recv_batch(self, timeout: float):
        """Every waiting payload at once, as BatchTransport.recv_batch: (rows, lens) views of
        the receive arena (no copy; valid until the next receive), or None after `timeout`."""
        if self._rx is None or self._received:
            return self._fallback.recv_batch(timeout)
        n = self._receive(timeout)
        if not n:
            return None
        return self._rx.rows[:n], self._rx.received[:n]

    def _receive(self, timeout: float) -> int:
        """What is staged leaves (as the pacer allows), then one recvmmsg; with nothing
        waiting, wait up to `timeout` for a payload, waking early for what the pacer held."""
        if self._head != self._tail:
            self.flush()
        fd = self.sock.fileno()
        n = self._take(fd)
        if n or timeout <= 0:
            return n
        end = time.monotonic() + timeout
        held = self.held_back()
        while held is not None and held < timeout:
            if self._readable(fd, held):
                return self._take(fd)
            self.flush()
            timeout = end - time.monotonic()
            if timeout <= 0:
                return self._take(fd)
            held = self.held_back()
        return self._take(fd) if self._poll.poll(timeout * 1000) else 0

    def _take(self, fd: int) -> int:
        """One recvmmsg into the receive arena without waiting: how many payloads came."""
        if self._native:
            return native.recvmmsg(fd, self._rx._hdr_at, self.BATCH)
        return self._rx.recv(fd)

    def _readable(self, fd: int, wait: float) -> bool:
        """Whether a payload waits, after at most `wait` seconds. select, not poll: the pacer's
        waits are shorter than poll's millisecond; but select takes no descriptor at or above
        FD_SETSIZE, and a worker in a large Mininet network starts with that many (a node's
        shell inherits every descriptor the building process held: Mininet opens it with
        close_fds=False), so such a socket waits with poll, rounded up to the millisecond."""
        if fd < FD_SETSIZE:
            return bool(select.select((fd,), (), (), wait)[0])
        return bool(self._poll.poll(math.ceil(wait * 1000)))

    def _recv_one(self, timeout: float) -> bytes | None:
        """Without recvmmsg: one payload per call, waiting with a socket timeout."""
        timeout = max(0.0, timeout)
        if timeout != self._timeout:           # settimeout only when it changes
            self.sock.settimeout(timeout)
            self._timeout = timeout
        try:
            return self.sock.recv(RECV_BYTES)     # payloads are wire.PAYLOAD_BYTES; more is foreign
        except (socket.timeout, BlockingIOError, InterruptedError):
            return None

    def close(self) -> None:
        try:
            if self._head != self._tail and self.sock.fileno() >= 0:
                self.drain()
        finally:
            _OPEN.discard(self)
            self.sock.close()

    def __enter__(self) -> "UdpTransport":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

