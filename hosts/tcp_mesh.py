"""TCP connections between worker hosts for the host baselines (hosts/ring.py, hosts/ps.py).

Why TCP: the baselines are what a cluster without in-network aggregation runs (NCCL's
ring, a parameter server), and those rely on the kernel's reliable transport; on the
emulated network it is TCP, forwarded (not aggregated) by the same switches, that
recovers from the drop simulator's loss and, once the controller has recomputed the
IP routes (controller/forwarding_job.py), from a failed link.

What this module gives the algorithms:

* `open_mesh`: one directed connection per (client -> server) pair the algorithm asks
  for, set up with retries until a deadline (peers start at different times), each
  opened with a hello that carries (algorithm, rank, workers, length, dtype) so workers
  that disagree fail at once with a ConsistencyError naming both values, never sum garbage;
* `Peer.send` / `Peer.recv_into`: length-prefixed messages (tag = per-direction message
  number, byte count) checked against what the algorithm expects next;
* no hang: after setup every socket call has the `give_up` timeout (no progress for that
  long raises AllreduceTimeout naming the peer); an error names the peer's rank and address.
"""

from __future__ import annotations

import socket
import struct
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np

from hosts.consistency import (DTYPES, DtypeMismatchError, LengthMismatchError,
                               WorkerCountMismatchError)
from hosts.diagnostics import AllreduceTimeout

BASE_PORT = 29500                        # + job: the port every worker listens on
ALGORITHM_CODES = {"ring": 1, "ps": 2}
_HELLO = struct.Struct(">4sBHHQB")       # magic, algorithm, rank, workers, length, dtype
_MAGIC = b"AGLB"
_FRAME = struct.Struct(">II")            # tag (message number on this direction), byte count
_RETRY = 0.05                            # seconds between connection attempts to a peer not yet listening
CONNECT_AT_ONCE = 16                     # connections a worker opens at a time (a PS of 128 opens 127)
SETUP_BYTES = 230                        # bytes one connection's setup puts on a worker's link, each
                                         # way: SYN or SYN-ACK, ACK, a hello (with headers), its ACK
SETUP_SLACK = 4                          # for the fabric: oversubscribed cores carry many workers'
                                         # handshakes, and a dropped SYN waits a second to be resent


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
        return _HELLO.pack(_MAGIC, ALGORITHM_CODES[self.algorithm], self.rank, self.workers, self.length,
                           DTYPES.index(np.dtype(self.dtype)))

    @classmethod
    def unpack(cls, data: bytes, who: str) -> "Hello":
        magic, algo, rank, workers, length, dtype = _HELLO.unpack(data)
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
            self.sock.sendall(_FRAME.pack(self.sent, view.nbytes) + view)
        self.sent += 1
        self.bytes_sent += view.nbytes

    def recv_into(self, out, what: str) -> None:
        """Receive the next message into `out` (a writable buffer of exactly its size)."""
        view = memoryview(out).cast("B")
        header = bytearray(_FRAME.size)
        self._read(memoryview(header), what)
        tag, nbytes = _FRAME.unpack(header)
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
        _shut(self.sock)


@dataclass
class Mesh:
    """This worker's connections: `out[r]` it opened to rank r, `inc[r]` rank r opened to it;
    `hello` what every peer agreed to (the algorithm, the workers, the array's length and dtype)."""
    out: dict[int, Peer]
    inc: dict[int, Peer]
    hello: Hello | None = None
    setup_seconds: float = 0.0

    def peers(self) -> list[Peer]:
        return list(self.out.values()) + list(self.inc.values())

    def bytes_sent(self) -> int:
        return sum(p.bytes_sent for p in self.peers())

    def close(self) -> None:
        for p in self.peers():
            p.close()


def setup_seconds(connections: int, give_up: float, link_mbps: float | None = None) -> float:
    """How long a worker may take to open its `connections`: 2 x give_up (the slowest peer may
    still be importing numpy when the first one connects), plus, on a shaped link, the time
    its link needs for their handshakes and hellos, SETUP_SLACK times over.

    Why the link counts: a parameter server of 128 workers opens 16,256 connections, 254 per
    worker; at 0.1 Mb/s a worker's link needs 4.7 s just to carry their setup, and the
    oversubscribed core more."""
    wire = connections * SETUP_BYTES * 8 / (link_mbps * 1e6) if link_mbps else 0.0
    return 2 * give_up + SETUP_SLACK * wire


def open_mesh(hello: Hello, addrs: list[str], out_to: list[int], in_from: list[int], *,
              port: int = BASE_PORT, give_up: float = 10.0, setup: float | None = None,
              link_mbps: float | None = None) -> Mesh:
    """Listen on addrs[rank]:port, connect to every rank in `out_to` (CONNECT_AT_ONCE at a
    time: one by one, a worker of a 128-worker PS would wait 127 handshakes in a row), accept
    every rank in `in_from`; both ends check the other's hello. `setup` (default
    `setup_seconds`) bounds the whole setup."""
    me = hello.rank
    if setup is None:
        setup = setup_seconds(len(out_to) + len(in_from), give_up, link_mbps)
    deadline = time.monotonic() + setup
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        listener.bind((addrs[me], port))
    except OSError as exc:
        listener.close()
        raise PeerError(f"rank {me}: cannot listen on {addrs[me]}:{port}: {exc}") from exc
    listener.listen(max(16, 2 * len(in_from)))
    accepted: dict[int, Peer] = {}
    failure: list[BaseException] = []
    acceptor = threading.Thread(target=_accept_all, name=f"accept-{me}", daemon=True,
                                args=(listener, hello, addrs, set(in_from), deadline, give_up, accepted, failure))
    acceptor.start()
    out: dict[int, Peer] = {}
    abort = threading.Event()
    try:
        _connect_all(hello, addrs, out_to, port, deadline, give_up, out, abort)
        acceptor.join(max(0.0, deadline - time.monotonic()) + 1)
        if failure:
            raise failure[0]
        missing = sorted(set(in_from) - set(accepted))
        if missing:
            raise AllreduceTimeout(f"rank {me}: rank(s) {missing} ({', '.join(addrs[r] for r in missing)}) "
                                   f"never connected to {addrs[me]}:{port} within the setup deadline")
    except BaseException:
        abort.set()
        _shut(listener)                      # wakes the acceptor, resets connections not yet accepted
        acceptor.join(1)
        for p in list(out.values()) + list(accepted.values()):
            p.close()
        raise
    _shut(listener)
    return Mesh(out, dict(accepted), hello, setup - max(0.0, deadline - time.monotonic()))


def _shut(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    sock.close()


def _connect_all(hello: Hello, addrs: list[str], out_to: list[int], port: int, deadline: float,
                 give_up: float, out: dict, abort: threading.Event) -> None:
    """Connect to every rank of `out_to`, CONNECT_AT_ONCE at a time, into `out`; the first
    error stops the others' retries and is raised (the caller closes what connected)."""
    from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait

    me = hello.rank
    if len(out_to) <= 1:
        for r in out_to:
            out[r] = _connect(hello, addrs[me], r, addrs[r], port, deadline, give_up, abort)
        return
    with ThreadPoolExecutor(max_workers=min(CONNECT_AT_ONCE, len(out_to)), thread_name_prefix=f"connect-{me}") as pool:
        futures = {pool.submit(_connect, hello, addrs[me], r, addrs[r], port, deadline, give_up, abort): r
                   for r in out_to}
        done, _ = wait(futures, return_when=FIRST_EXCEPTION)
        if any(f.exception() is not None for f in done):
            abort.set()
        wait(futures)
    errors = []
    for f, r in futures.items():
        if f.exception() is None:
            out[r] = f.result()
        elif not isinstance(f.exception(), _Aborted):
            errors.append(f.exception())
    if errors:
        raise errors[0]


class _Aborted(PeerError):
    """Another connection of the same setup failed first: this one stopped trying."""


def _connect(hello: Hello, source: str, r: int, addr: str, port: int, deadline: float, give_up: float,
             abort: threading.Event | None = None) -> Peer:
    """Connect to rank r (retrying while it is not listening yet) and exchange hellos."""
    me, last = hello.rank, None
    while True:
        if abort is not None and abort.is_set():
            raise _Aborted(f"rank {me}: gave up connecting to rank {r}: another connection failed")
        left = deadline - time.monotonic()
        if left <= 0:
            raise AllreduceTimeout(f"rank {me}: could not connect to rank {r} ({addr}:{port}) before the "
                                   f"setup deadline: {last or 'no answer'}")
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.settimeout(left)
        try:
            sock.bind((source, 0))              # the peer sees (and names) this worker's own address
            sock.connect((addr, port))
            break
        except (ConnectionRefusedError, socket.timeout, OSError) as exc:
            sock.close()
            last = exc
            time.sleep(min(_RETRY, max(0.0, deadline - time.monotonic())))
    peer = Peer(sock, me, r, addr, give_up)
    try:
        sock.settimeout(max(0.1, deadline - time.monotonic()))
        _send_hello(sock, hello, peer.name)
        theirs = Hello.unpack(_read_exact(sock, _HELLO.size, peer.name, me), peer.name)
        if theirs.rank != r:
            raise PeerError(f"rank {me}: {addr}:{port} answered as rank {theirs.rank}, expected rank {r}")
        hello.check(theirs, peer.name)
        sock.settimeout(give_up)
    except BaseException:
        peer.close()
        raise
    return peer


def _accept_all(listener, hello: Hello, addrs, expected: set[int], deadline: float, give_up: float,
                accepted: dict, failure: list) -> None:
    """Accept until every expected rank connected; a bad hello ends setup with its error."""
    me = hello.rank
    try:
        while expected - set(accepted):
            left = deadline - time.monotonic()
            if left <= 0:
                return
            listener.settimeout(left)
            try:
                sock, (ip, _) = listener.accept()
            except socket.timeout:
                return
            who = f"a worker at {ip}"
            sock.settimeout(max(0.1, deadline - time.monotonic()))
            theirs = Hello.unpack(_read_exact(sock, _HELLO.size, who, me), who)
            if theirs.rank not in expected or theirs.rank in accepted:
                sock.close()
                raise PeerError(f"rank {me}: {ip} connected as rank {theirs.rank}, expected one of "
                                f"{sorted(expected - set(accepted))}")
            peer = Peer(sock, me, theirs.rank, ip, give_up)
            try:
                _send_hello(sock, hello, peer.name)   # first, so a disagreeing peer learns it too
                hello.check(theirs, peer.name)
            except BaseException:
                peer.close()
                raise
            sock.settimeout(give_up)
            accepted[theirs.rank] = peer
    except BaseException as exc:   # handed to open_mesh, which raises it in the worker's thread
        failure.append(exc)


def _send_hello(sock: socket.socket, hello: Hello, who: str) -> None:
    try:
        sock.sendall(hello.pack())
    except OSError as exc:        # a timeout is an OSError too: setup is bounded by its deadline
        raise PeerError(f"rank {hello.rank}: {who} broke the connection during setup: {exc}") from exc


def _read_exact(sock: socket.socket, n: int, who: str, me: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        try:
            chunk = sock.recv(n - len(buf))
        except socket.timeout:
            raise AllreduceTimeout(f"rank {me}: {who} sent no hello before the setup deadline") from None
        except OSError as exc:
            raise PeerError(f"rank {me}: {who} broke the connection during setup: {exc}") from exc
        if not chunk:
            raise PeerError(f"rank {me}: {who} closed the connection during setup")
        buf += chunk
    return bytes(buf)


class Threads:
    """The threads of one allreduce: the first error (naming its peer) is kept, the mesh
    closed and the counters aborted so every other thread unblocks at once, and `join`
    re-raises that first error in the caller (later ones are consequences of the closing)."""

    def __init__(self, mesh: Mesh, counters: list["Progress"]):
        self.mesh, self.counters = mesh, counters
        self.errors: list[BaseException] = []
        self.threads: list[threading.Thread] = []
        self.lock = threading.Lock()

    def spawn(self, name: str, fn, *args) -> None:
        def body():
            try:
                fn(*args)
            except BaseException as exc:
                with self.lock:
                    self.errors.append(exc)
                self.mesh.close()
                for c in self.counters:
                    c.abort()
        t = threading.Thread(target=body, name=name, daemon=True)
        self.threads.append(t)
        t.start()

    def join(self) -> None:
        for t in self.threads:
            t.join()
        if self.errors:
            raise self.errors[0]


class Progress:
    """A counter threads bump and wait on (the ring's chunk dependencies, the PS's arrivals)."""

    def __init__(self, give_up: float, me: int):
        self.cond = threading.Condition()
        self.done = 0
        self.give_up, self.me = give_up, me
        self.aborted = False

    def bump(self) -> None:
        with self.cond:
            self.done += 1
            self.cond.notify_all()

    def abort(self) -> None:
        with self.cond:
            self.aborted = True
            self.cond.notify_all()

    def wait_for(self, count: int, what: str) -> None:
        """Block until done >= count; at most give_up seconds without a bump."""
        with self.cond:
            while self.done < count:
                seen = self.done
                if self.aborted:
                    raise PeerError(f"rank {self.me}: aborted while waiting for {what}")
                if not self.cond.wait(self.give_up) and self.done == seen and not self.aborted:
                    raise AllreduceTimeout(f"rank {self.me}: waited {self.give_up:g} s for {what} "
                                           f"({self.done}/{count} done)")


def tcp_counters() -> dict[str, int]:
    """This network namespace's TCP counters from /proc/net/snmp (per namespace in Mininet):
    OutSegs (segments sent, ACKs included) and RetransSegs (segments retransmitted)."""
    with open("/proc/net/snmp") as f:
        rows = [line.split() for line in f if line.startswith("Tcp:")]
    table = dict(zip(rows[0][1:], rows[1][1:]))
    return {"OutSegs": int(table["OutSegs"]), "RetransSegs": int(table["RetransSegs"])}


@dataclass
class BaselineStats:
    """The same keys the in-network agents report (hosts/diagnostics.AllreduceStats) where they
    mean the same thing: packets_sent = TCP segments this host sent (ACKs included),
    retransmissions = TCP segments it retransmitted, both from its namespace's counters."""
    packets_sent: int = 0
    retransmissions: int = 0
    seconds: float = 0.0
    setup_seconds: float = 0.0
    bytes_sent: int = 0               # payload bytes handed to TCP (frames and hellos excluded)
    messages_sent: int = 0


def hello_for(algorithm: str, array, rank: int, workers: int) -> Hello:
    """What a worker's connections agree on for `array` (checked: 1-D, a supported dtype)."""
    arr = np.asarray(array)
    if arr.dtype not in DTYPES or arr.ndim != 1:
        raise TypeError(f"allreduce supports 1-D {[str(d) for d in DTYPES]} arrays, got {arr.dtype} "
                        f"with shape {arr.shape}")
    if not 0 <= rank < workers:
        raise ValueError(f"rank {rank} is not within 0..{workers - 1} (one address per worker)")
    return Hello(algorithm, rank, workers, len(arr), arr.dtype)


def allreduce_over_mesh(algorithm: str, body, array, *, rank: int, peers: list[str],
                        out_to: list[int], in_from: list[int], port: int = BASE_PORT,
                        give_up: float = 10.0, return_stats: bool = False, link_mbps: float | None = None,
                        mesh: Mesh | None = None):
    """Shared frame of the baselines: check the call, open the mesh (unless `mesh`, already
    open for this array's length and dtype, is given: then it stays open, and the time and
    segments counted are the allreduce's alone), run `body(arr, mesh)` (which returns the
    sum), close what it opened, count TCP segments around it."""
    arr = np.ascontiguousarray(array)
    hello = hello_for(algorithm, arr, rank, len(peers))
    if mesh is not None and mesh.hello != hello:
        raise ValueError(f"rank {rank}: the open connections were set up for {mesh.hello}, not for {hello}")
    before, t0 = tcp_counters(), time.monotonic()
    stats = BaselineStats()
    if len(peers) == 1:
        result = arr.copy()
    else:
        own = mesh is None
        if own:
            mesh = open_mesh(hello, peers, out_to, in_from, port=port, give_up=give_up, link_mbps=link_mbps)
            stats.setup_seconds = time.monotonic() - t0
        sent_before = (mesh.bytes_sent(), sum(p.sent for p in mesh.peers()))
        try:
            result = body(arr, mesh)
        finally:
            if own:
                mesh.close()
        stats.bytes_sent = mesh.bytes_sent() - sent_before[0]
        stats.messages_sent = sum(p.sent for p in mesh.peers()) - sent_before[1]
    after = tcp_counters()
    stats.seconds = time.monotonic() - t0
    stats.packets_sent = after["OutSegs"] - before["OutSegs"]
    stats.retransmissions = after["RetransSegs"] - before["RetransSegs"]
    return (result, stats) if return_stats else result


def chunk_bounds(lo: int, hi: int, chunk: int) -> list[tuple[int, int]]:
    """[lo, hi) cut into pieces of at most `chunk` elements; an empty range is one empty
    piece, so every segment is at least one message and the schedule never depends on data."""
    if hi <= lo:
        return [(lo, lo)]
    return [(a, min(a + chunk, hi)) for a in range(lo, hi, chunk)]


def segment_bounds(length: int, parts: int) -> list[tuple[int, int]]:
    """`length` elements split into `parts` contiguous segments whose sizes differ by at most 1."""
    edges = [length * i // parts for i in range(parts + 1)]
    return list(zip(edges[:-1], edges[1:]))
