"""How an agent moves UDP payloads: the `Transport` protocol and its UDP implementation.

Why an abstraction: the same worker code must run over a real socket inside a
Mininet host, and over an in-process harness (tests/fakenet.py) that feeds the
software switch directly.  The agent only ever sends and receives whole UDP
payloads (agg_h + values), so that is all a transport has to do.
"""

from __future__ import annotations

import errno
import socket
from typing import Protocol, runtime_checkable

from ground import wire

BUFFER_BYTES = 16 * 1024 * 1024   # the kernel caps this at net.core.{r,w}mem_max


@runtime_checkable
class Transport(Protocol):
    def send(self, payload: bytes) -> None:
        """Send one UDP payload to the aggregation service (never blocks for long)."""

    def recv(self, timeout: float) -> bytes | None:
        """Next UDP payload addressed to this worker, or None after `timeout` seconds (0 = poll)."""


class UdpTransport:
    """One UDP socket bound to (local_ip, AGG_UDP_PORT), sending to (service_ip, AGG_UDP_PORT).

    Large socket buffers matter: a window of S slots means S packets can arrive
    back to back (one multicast burst per completed slot), and a dropped result
    costs a full retransmission timeout.
    """

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

    def send(self, payload: bytes) -> None:
        """A down link (ENETUNREACH, ENETDOWN) or a full queue (ENOBUFS) is packet loss:
        the retransmission timer recovers, or the controller reports a partition."""
        try:
            self.sock.sendto(payload, self.dest)
        except OSError as exc:
            if exc.errno not in (errno.ENETUNREACH, errno.ENETDOWN, errno.EHOSTUNREACH, errno.ENOBUFS):
                raise
            self.send_errors += 1

    def recv(self, timeout: float) -> bytes | None:
        timeout = max(0.0, timeout)
        if timeout != self._timeout:           # settimeout only when it changes
            self.sock.settimeout(timeout)
            self._timeout = timeout
        try:
            return self.sock.recv(4096)           # payloads are wire.PAYLOAD_BYTES; more is foreign
        except (socket.timeout, BlockingIOError, InterruptedError):
            return None

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> "UdpTransport":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
