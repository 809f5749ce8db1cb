"""The TCP connections between the worker hosts of a host baseline (hosts/ring.py, hosts/ps.py).

Why TCP: the baselines are what a cluster without in-network aggregation runs (NCCL's
ring, a parameter server), and those rely on the kernel's reliable transport; on the
emulated network it is TCP, forwarded (not aggregated) by the same switches, that
recovers from the drop simulator's loss and, once the controller has recomputed the
IP routes (controller/forwarding_job.py), from a failed link.

Why a module of its own: setting up the mesh is the part that must survive peers starting
at different times and, for a parameter server of 128 workers, 16,256 handshakes.
`open_mesh` opens one directed connection per (client -> server) pair the algorithm asks
for, with retries until a deadline, each checked by its hello (hosts/tcp_peer.py, which
also frames the messages once it is open); what the algorithms do over it is
hosts/mesh_allreduce.py's.
"""

from __future__ import annotations

import socket
import threading
import time
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from dataclasses import dataclass

from agglab.hosts.diagnostics import AllreduceTimeout
from agglab.hosts.tcp_peer import HELLO_STRUCT, Hello, Peer, PeerError, shut

BASE_PORT = 29500                        # + job: the port every worker listens on
_RETRY = 0.05                            # seconds between connection attempts to a peer not yet listening
CONNECT_AT_ONCE = 16                     # connections a worker opens at a time (a PS of 128 opens 127)
SETUP_BYTES = 230                        # bytes one connection's setup puts on a worker's link, each
                                         # way: SYN or SYN-ACK, ACK, a hello (with headers), its ACK
SETUP_SLACK = 4                          # for the fabric: oversubscribed cores carry many workers'
                                         # handshakes, and a dropped SYN waits a second to be resent


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
        shut(listener)                      # wakes the acceptor, resets connections not yet accepted
        acceptor.join(1)
        for p in list(out.values()) + list(accepted.values()):
            p.close()
        raise
    shut(listener)
    return Mesh(out, dict(accepted), hello, setup - max(0.0, deadline - time.monotonic()))


def _connect_all(hello: Hello, addrs: list[str], out_to: list[int], port: int, deadline: float,
                 give_up: float, out: dict, abort: threading.Event) -> None:
    """Connect to every rank of `out_to`, CONNECT_AT_ONCE at a time, into `out`; the first
    error stops the others' retries and is raised (the caller closes what connected)."""
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
        theirs = Hello.unpack(_read_exact(sock, HELLO_STRUCT.size, peer.name, me), peer.name)
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
            theirs = Hello.unpack(_read_exact(sock, HELLO_STRUCT.size, who, me), who)
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
