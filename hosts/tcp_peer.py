"""One TCP connection between two host-baseline workers (hosts/ring.py, hosts/ps.py).

Why a module of its own: what crosses one connection is a small protocol of its own, and
three places speak it (the mesh's setup in hosts/tcp_mesh.py, the threads of ring and PS,
the one-thread event loop in hosts/flow_loop.py):

* the `Hello` both ends send first and check: (algorithm, rank, workers, length, dtype), so
  workers that disagree fail at once with a ConsistencyError naming both values, never sum
  garbage;
* `Peer.send` / `Peer.recv_into`: length-prefixed messages (tag = per-direction message
  number, byte count) checked against what the algorithm expects next;
* no hang: every socket call has the `give_up` timeout (no progress for that long raises
  AllreduceTimeout naming the peer); an error names the peer's rank and address.
"""

from __future__ import annotations

import socket
import struct
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np

from agglab.hosts.consistency import (DTYPES, DtypeMismatchError, LengthMismatchError,
                               WorkerCountMismatchError)
from agglab.hosts.diagnostics import AllreduceTimeout

ALGORITHM_CODES = {"ring": 1, "ps": 2}
HELLO_STRUCT = struct.Struct(">4sBHHQB")  # magic, algorithm, rank, workers, length, dtype
_MAGIC = b"AGLB"
FRAME_STRUCT = struct.Struct(">II")       # tag (message number on this direction), byte count


class PeerError(ConnectionError):
    """A peer closed its connection, reset it or broke the protocol; the message names it."""


@dataclass(frozen=True)
class Hello:
    """What both ends of every connection must agree on."""
    algorithm: str
    rank: int
    workers: int
    length: int
    dtype: np.dtype

    def pack(self) -> bytes:
        return HELLO_STRUCT.pack(_MAGIC, ALGORITHM_CODES[self.algorithm], self.rank, self.workers, self.length,
                                 DTYPES.index(np.dtype(self.dtype)))

    @classmethod
    def unpack(cls, data: bytes, who: str) -> "Hello":
        magic, algo, rank, workers, length, dtype = HELLO_STRUCT.unpack(data)
        names = {code: name for name, code in ALGORITHM_CODES.items()}
        if magic != _MAGIC or algo not in names or dtype >= len(DTYPES):
            raise PeerError(f"{who} sent a malformed hello {data!r} (not an agglab baseline worker?)")
        return cls(names[algo], rank, workers, length, DTYPES[dtype])

    def check(self, theirs: "Hello", who: str) -> None:
        """Raise the ConsistencyError that says how the peer disagrees with us."""
        if theirs.algorithm != self.algorithm:
            raise PeerError(f"{who} runs --algorithm {theirs.algorithm}, this worker {self.algorithm}")
        if theirs.workers != self.workers:
            raise WorkerCountMismatchError(f"{who} was started for {theirs.workers} workers, "
                                           f"this worker for {self.workers}")
        if theirs.length != self.length:
            raise LengthMismatchError(f"{who} has an array of {theirs.length} elements, "
                                      f"this worker {self.length}: every worker must pass the same length")
        if theirs.dtype != self.dtype:
            raise DtypeMismatchError(f"{who} has dtype {theirs.dtype}, this worker {self.dtype}")


class Peer:
    """One connected socket to the worker of rank `rank`, with framed, timed-out I/O."""

    def __init__(self, sock: socket.socket, me: int, rank: int, addr: str, give_up: float):
        self.sock, self.me, self.rank, self.addr, self.give_up = sock, me, rank, addr, give_up
        self.sent = self.received = 0            # messages, for the tags
        self.bytes_sent = 0
        sock.settimeout(give_up)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    @property
    def name(self) -> str:
        return f"rank {self.rank} ({self.addr})"

    def send(self, payload) -> None:
        """Send one message (a bytes-like or a numpy array view)."""
        view = memoryview(payload).cast("B")
        with self._errors(lambda: f"{self.name} accepted no data for {self.give_up:g} s (message {self.sent}, "
                          f"{view.nbytes} bytes): peer stalled or unreachable (failed link not rerouted?)",
                          lambda: f"sending to {self.name} failed"):
            # one call: with TCP_NODELAY a separate header would leave as a segment of its own
            self.sock.sendall(FRAME_STRUCT.pack(self.sent, view.nbytes) + view)
        self.sent += 1
        self.bytes_sent += view.nbytes

    def recv_into(self, out, what: str) -> None:
        """Receive the next message into `out` (a writable buffer of exactly its size)."""
        view = memoryview(out).cast("B")
        header = bytearray(FRAME_STRUCT.size)
        self._read(memoryview(header), what)
        tag, nbytes = FRAME_STRUCT.unpack(header)
        if tag != self.received or nbytes != view.nbytes:
            raise PeerError(f"rank {self.me}: {self.name} sent message {tag} of {nbytes} bytes, expected "
                            f"message {self.received} of {view.nbytes} bytes ({what}): protocol out of step")
        self._read(view, what)
        self.received += 1

    def _read(self, view: memoryview, what: str) -> None:
        got = 0
        while got < view.nbytes:
            with self._errors(lambda: f"no data from {self.name} for {self.give_up:g} s while receiving {what} "
                              f"({got}/{view.nbytes} bytes of message {self.received})",
                              lambda: f"receiving {what} from {self.name} failed"):
                n = self.sock.recv_into(view[got:])
            if n == 0:
                raise PeerError(f"rank {self.me}: {self.name} closed the connection while this worker "
                                f"waited for {what} (did it fail? see its own error)")
            got += n

    @contextmanager
    def _errors(self, timed_out, failed):
        """Socket errors as this module's: a timeout names what was awaited, an error the peer."""
        try:
            yield
        except socket.timeout:
            raise AllreduceTimeout(f"rank {self.me}: {timed_out()}") from None
        except OSError as exc:
            raise PeerError(f"rank {self.me}: {failed()}: {exc}") from exc

    def close(self) -> None:
        """Shut down first: that (not close) wakes another thread blocked on this socket."""
        shut(self.sock)


def shut(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    sock.close()


def hello_for(algorithm: str, array, rank: int, workers: int) -> Hello:
    """What a worker's connections agree on for `array` (checked: 1-D, a supported dtype)."""
    arr = np.asarray(array)
    if arr.dtype not in DTYPES or arr.ndim != 1:
        raise TypeError(f"allreduce supports 1-D {[str(d) for d in DTYPES]} arrays, got {arr.dtype} "
                        f"with shape {arr.shape}")
    if not 0 <= rank < workers:
        raise ValueError(f"rank {rank} is not within 0..{workers - 1} (one address per worker)")
    return Hello(algorithm, rank, workers, len(arr), arr.dtype)
