"""Host-based BML on BCube for ONE host: the worker side of controller/trees/bml.py over TCP.

Why real sockets: the in-network variant is compared with this baseline, which must pay what
a real server pays: per-NIC TCP streams one switch hop long, kernel copies, and stages that
last as long as their largest transfer.

NIC l serves level l: the host listens on each NIC IP and sends level-l pieces from its
level-l IP to the peer's level-l IP, over one one-way TCP connection per (sender, receiver,
level), opened once (with a hello naming sender and level) and kept for all 2L stages. A stage
runs its connections at once, a thread each; received pieces are applied after the stage, in
schedule order, so senders send what they held at the stage's start (simulate_bml's
semantics). No clock orders stages: each frame carries (stage, part, piece, dtype, length)
and the receiver checks it against the plan, so a peer with another plan or length fails loudly.

Arithmetic: int32 wraps like numpy. float32 is summed in float32 along a tree in which each
value meets at most h = L(n-1) additions (n-1 per reduce stage, order differing per piece), so
with u = 2^-24:  |result - exact| <= gamma_h * sum_i |x_i|,  gamma_h = h*u / (1 - h*u)
(Higham, Accuracy and Stability of Numerical Algorithms, sec. 4.2). All-gather copies bytes:
every host gets the same bits, equal to simulate_bml's float32 result.

One deadline (start + timeout) bounds connecting (retried while the peer is not listening
yet), accepting and every send and receive. The first failure, naming peer, level and stage,
shuts every socket down so the other threads stop at once, and is raised as BmlHostError.
Sockets are closed and threads joined on every path.
"""
from __future__ import annotations

import contextlib
import errno
import selectors
import socket
import struct
import threading
import time
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from functools import partial
from typing import NamedTuple

import numpy as np

PLAN_FORMAT = "agglab-bml-plan/1"
OPS = ("reduce", "gather")
HELLO = struct.Struct("<4sBH")      # b"BMLh", level, length of the utf-8 sender name that follows
FRAME = struct.Struct("<4sHHIBQ")   # b"BMLf", stage, part, piece, dtype code, payload bytes
DTYPES = {1: np.dtype("<i4"), 2: np.dtype("<f4")}
SMALL = 65536                       # payloads up to this size go out in one send with their header
_RETRY = (errno.ECONNREFUSED, errno.ECONNRESET, errno.ETIMEDOUT, errno.EHOSTUNREACH, errno.ENETUNREACH)


class BmlHostError(RuntimeError):
    """A transfer or connection that failed; the message names peer, level and stage."""


PlanTransfer = NamedTuple("PlanTransfer", [("src", str), ("dst", str), ("part", int), ("piece", int),
                                           ("via", str), ("level", int), ("op", str)])   # = bml.Transfer


class Plan(NamedTuple):
    """The part of BmlSchedule a worker needs (same field names), without networkx."""
    n: int
    k: int
    hosts: tuple
    stages: tuple

    @property
    def levels(self) -> int:
        return self.k + 1


def plan_to_json(sched) -> dict:
    """JSON-ready plan; each transfer is [src, dst, part, piece, via, level, op]."""
    return {"format": PLAN_FORMAT, "n": int(sched.n), "k": int(sched.k), "hosts": list(sched.hosts),
            "stages": [[[t.src, t.dst, int(t.part), int(t.piece), t.via, int(t.level), t.op] for t in stage]
                       for stage in sched.stages]}


def plan_from_json(d: dict) -> Plan:
    """Validate and rebuild; a worker must reject a bad plan before opening any socket."""
    if d.get("format") != PLAN_FORMAT:
        raise ValueError(f"not a BML plan (format {d.get('format')!r}, expected {PLAN_FORMAT!r})")
    n, k, hosts = int(d["n"]), int(d["k"]), tuple(d["hosts"])
    if len(hosts) != n ** (k + 1) or len(set(hosts)) != len(hosts):
        raise ValueError(f"BCube({n},{k}) needs {n ** (k + 1)} distinct hosts, got {len(hosts)}")
    stages = []
    for s, rows in enumerate(d["stages"]):
        stage = []
        for row in rows:
            try:
                t = PlanTransfer(*(f(v) for f, v in zip((str, str, int, int, str, int, str), row, strict=True)))
            except (TypeError, ValueError) as e:
                raise ValueError(f"stage {s}: malformed transfer {row!r}") from e
            if (t.src not in hosts or t.dst not in hosts or t.src == t.dst or t.op not in OPS
                    or not 0 <= t.level <= k or not 0 <= t.part <= k or not 0 <= t.piece < len(hosts)):
                raise ValueError(f"stage {s}: bad transfer {row!r}")
            stage.append(t)
        stages.append(tuple(stage))
    return Plan(n, k, hosts, tuple(stages))


class _Links:
    """One host's sockets and counters; every blocking call is bounded by the shared deadline."""

    def __init__(self, me: str, nic_ip: dict, port: int, deadline: float, timeout: float) -> None:
        self.me, self.nic_ip, self.port, self.deadline, self.timeout = me, nic_ip, port, deadline, timeout
        self.stop, self.lock, self.socks = threading.Event(), threading.Lock(), []
        self.listeners, self.out, self.inc = {}, {}, {}    # level -> socket; (peer, level) -> socket
        self.sent, self.payload = {}, {}                     # (peer, level) -> bytes: on the wire; arrays only

    def _new(self, sock: socket.socket | None = None) -> socket.socket:
        sock = sock or socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        with self.lock:                                       # close() reaches every socket ever made
            self.socks.append(sock)
        return sock

    def remaining(self, where: str) -> float:
        left = self.deadline - time.monotonic()
        if self.stop.is_set():
            raise BmlHostError(f"{self.me}: {where}: stopped after another failure")
        if left <= 0:
            raise BmlHostError(f"{self.me}: {where}: timed out ({self.timeout:g} s for the whole allreduce)")
        return left

    def listen(self, levels) -> None:
        for l in levels:
            ip = self.nic_ip[self.me, l]
            sock = self._new()
            try:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                sock.bind((ip, self.port))
                sock.listen(64)
                sock.setblocking(False)
            except OSError as e:
                raise BmlHostError(f"{self.me}: cannot listen on {ip}:{self.port} (level {l}) before stage 0: "
                                   f"{e}") from None
            self.listeners[l] = sock

    def connect(self, peer: str, level: int) -> None:
        ip = self.nic_ip[peer, level]
        where = f"connecting to {peer} at {ip}:{self.port} (level {level}) before stage 0"
        last: OSError | None = None
        while True:
            left = self.remaining(f"{where} (last error: {last})" if last else where)
            sock = self._new()
            try:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)   # our TIME_WAITs never
                sock.bind((self.nic_ip[self.me, level], 0))      # block a listen; leave via NIC `level`
                sock.settimeout(min(left, 1.0))
                sock.connect((ip, self.port))
                break
            except OSError as e:
                sock.close()
                if not isinstance(e, TimeoutError) and e.errno not in _RETRY:
                    raise BmlHostError(f"{self.me}: {where}: {e}") from None
                last = e
                time.sleep(min(0.05, max(0.0, self.deadline - time.monotonic())))
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        name = self.me.encode()
        self._send(sock, HELLO.pack(b"BMLh", level, len(name)) + name, where)
        self.out[peer, level], self.sent[peer, level], self.payload[peer, level] = sock, HELLO.size + len(name), 0

    def accept_all(self, expected) -> None:
        missing = set(expected)
        with selectors.DefaultSelector() as sel:
            for l, sock in self.listeners.items():
                sel.register(sock, selectors.EVENT_READ, l)
            while missing:
                names = ", ".join(f"{p} (level {l})" for p, l in sorted(missing))
                left = self.remaining(f"waiting for {names} to connect before stage 0")
                for key, _ in sel.select(min(left, 0.05)):
                    try:
                        conn, addr = key.fileobj.accept()
                    except BlockingIOError:
                        continue
                    self._new(conn).setblocking(True)
                    where = f"reading the hello from {addr[0]} (level {key.data}) before stage 0"
                    magic, level, size = HELLO.unpack(self._read(conn, HELLO.size, where))
                    peer = self._read(conn, size, where).decode(errors="replace")
                    if magic != b"BMLh" or level != key.data or (peer, level) not in missing \
                            or self.nic_ip.get((peer, level)) != addr[0]:
                        raise BmlHostError(f"{self.me}: unexpected connection from {addr[0]} claiming to be "
                                           f"{peer!r} on level {level} (listening on {key.data}) before stage 0")
                    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                    missing.discard((peer, level))
                    self.inc[peer, level] = conn

    def _read_into(self, sock: socket.socket, view: memoryview, where: str) -> None:
        got = 0
        while got < len(view):
            sock.settimeout(self.remaining(where))
            try:
                k = sock.recv_into(view[got:])
            except TimeoutError:
                k = -1                                           # remaining() raises on the next turn
            except OSError as e:
                raise BmlHostError(f"{self.me}: {where}: {e}") from None
            if k == 0:
                raise BmlHostError(f"{self.me}: {where}: connection closed by the peer")
            got += max(k, 0)

    def _read(self, sock: socket.socket, size: int, where: str) -> bytes:
        self._read_into(sock, memoryview(buf := bytearray(size)), where)
        return bytes(buf)

    def _send(self, sock: socket.socket, data, where: str) -> None:
        sock.settimeout(self.remaining(where))
        try:
            sock.sendall(data)
        except TimeoutError:
            self.remaining(where)
            raise BmlHostError(f"{self.me}: {where}: timed out") from None
        except OSError as e:
            raise BmlHostError(f"{self.me}: {where}: {e}") from None

    def send(self, stage: int, key: tuple, transfers: list, pieces: list, code: int) -> None:
        peer, level = key
        for t in transfers:
            where = f"stage {stage}: sending part {t.part} piece {t.piece} to {peer} (level {level})"
            arr = pieces[t.part][t.piece]
            header = FRAME.pack(b"BMLf", stage, t.part, t.piece, code, arr.nbytes)
            payload = memoryview(arr).cast("B")
            if arr.nbytes <= SMALL:
                self._send(self.out[key], header + payload.tobytes(), where)
            else:
                self._send(self.out[key], header, where)
                self._send(self.out[key], payload, where)
            self.sent[key] += FRAME.size + arr.nbytes
            self.payload[key] += arr.nbytes

    def recv(self, stage: int, key: tuple, transfers: list, pieces: list, code: int) -> list:
        peer, level = key
        got = []
        for t in transfers:
            where = f"stage {stage}: receiving part {t.part} piece {t.piece} from {peer} (level {level})"
            magic, st, part, piece, dcode, nbytes = FRAME.unpack(self._read(self.inc[key], FRAME.size, where))
            mine = pieces[t.part][t.piece]
            for bad, why in [(magic != b"BMLf" or (st, part, piece) != (stage, t.part, t.piece),
                              f"got stage {st} part {part} piece {piece}; do the hosts run the same plan?"),
                             (dcode != code, f"peer sends {DTYPES.get(dcode, dcode)}, I hold {DTYPES[code]}"),
                             (nbytes != mine.nbytes, f"{nbytes} bytes, expected {mine.nbytes} (same length?)")]:
                if bad:
                    raise BmlHostError(f"{self.me}: {where}: {why}")
            buf = np.empty_like(mine)
            self._read_into(self.inc[key], memoryview(buf).cast("B"), where)
            got.append(buf)
        return got

    def run(self, pool: ThreadPoolExecutor, jobs: list) -> list:
        """All jobs at once; on the first failure shut every socket down, wait, raise it."""
        futures = [pool.submit(job) for job in jobs]
        done, _ = wait(futures, return_when=FIRST_EXCEPTION)
        failed = [f.exception() for f in futures if f in done and f.exception() is not None]
        if failed:
            self.stop.set()
            with self.lock:
                for sock in self.socks:
                    with contextlib.suppress(OSError):
                        sock.shutdown(socket.SHUT_RDWR)
            wait(futures)
            raise failed[0]
        return [f.result() for f in futures]

    def close(self) -> None:
        """Shut down first: a thread still blocked in recv (after an interrupt) then wakes up."""
        self.stop.set()
        with self.lock:
            for sock in self.socks:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                sock.close()


class Connected(NamedTuple):
    """One host's connections to its BML peers, open and idle (`connect_host_bml`)."""
    plan: Plan
    links: _Links
    pool: ThreadPoolExecutor
    setup: float                  # seconds the connections took to open


def connect_host_bml(me: str, sched, nic_ip: dict, port: int = 47000, timeout: float = 30.0) -> Connected:
    """Open `me`'s connections to every peer of its schedule (each peer must do the same at
    about the same time), for `run_host_bml(..., connected=...)`.

    Why apart: a worker opens them before the start gate, as the other host baselines open
    theirs (hosts/schemes/_tcp.py), so the allreduce's time is its stages', not the handshakes
    (at 0.15 Mb/s a handshake and its hello take ~20 ms of a NIC, retried every 50 ms while a
    peer is not listening yet), which the ring's and the PS's times never count either."""
    start = time.monotonic()
    plan = plan_from_json(sched) if isinstance(sched, dict) else sched
    if me not in plan.hosts:
        raise ValueError(f"{me!r} is not a host of this BCube({plan.n},{plan.k}) plan")
    outs = sorted({(t.dst, t.level) for stage in plan.stages for t in stage if t.src == me})
    ins = sorted({(t.src, t.level) for stage in plan.stages for t in stage if t.dst == me})
    links = _Links(me, nic_ip, port, start + timeout, timeout)
    pool = ThreadPoolExecutor(max_workers=len(outs) + len(ins) + 1, thread_name_prefix=f"bml-{me}")
    try:
        links.listen(sorted({l for _, l in ins}))
        links.run(pool, [partial(links.connect, *key) for key in outs] + [partial(links.accept_all, ins)])
    except BaseException:
        links.close()
        pool.shutdown(wait=True)
        raise
    return Connected(plan, links, pool, time.monotonic() - start)


def run_host_bml(array: np.ndarray, me: str, sched, nic_ip: dict, port: int = 47000,
                 timeout: float = 30.0, return_stats: bool = False, connected: Connected | None = None):
    """Allreduce `array` with the other hosts of `sched` (BmlSchedule, Plan or plan_to_json dict).

    nic_ip[(host, level)] is the IP of that host's level-`level` NIC; every host listens on
    `port` of each of its NIC IPs. Returns the sum (and a stats dict if return_stats);
    raises BmlHostError within `timeout` seconds if any peer fails. With `connected`
    (connect_host_bml, done before), the connections are already open: `timeout` then bounds
    the stages alone, and the stats' `setup_seconds` is what opening them took.
    """
    start = time.monotonic()
    data = np.asarray(array)
    if data.ndim != 1 or data.dtype not in (np.int32, np.float32):
        raise ValueError(f"need a 1-D int32 or float32 array, got {data.dtype} with shape {data.shape}")
    if connected is None:
        connected = connect_host_bml(me, sched, nic_ip, port, timeout)
    else:
        connected.links.deadline = start + timeout
    plan, links, pool, setup = connected
    levels, count = plan.k + 1, len(plan.hosts)
    code = 1 if data.dtype == np.int32 else 2
    result = data.astype(DTYPES[code], copy=True)
    pieces = [np.array_split(part, count) for part in np.array_split(result, levels)]   # views of result
    outs = sorted({(t.dst, t.level) for stage in plan.stages for t in stage if t.src == me})
    ins = sorted({(t.src, t.level) for stage in plan.stages for t in stage if t.dst == me})
    stage_seconds = []
    try:
        for s, stage in enumerate(plan.stages):
            t0 = time.monotonic()
            sends, recvs = {}, {}
            for t in stage:
                if t.src == me:
                    sends.setdefault((t.dst, t.level), []).append(t)
                elif t.dst == me:
                    recvs.setdefault((t.src, t.level), []).append(t)
            jobs = [partial(links.send, s, key, ts, pieces, code) for key, ts in sends.items()]
            jobs += [partial(links.recv, s, key, ts, pieces, code) for key, ts in recvs.items()]
            done = links.run(pool, jobs)[len(sends):]
            received = {key: iter(values) for key, values in zip(recvs, done)}
            for t in stage:                                  # schedule order = simulate_bml's order
                if t.dst == me:
                    cell, value = pieces[t.part][t.piece], next(received[t.src, t.level])
                    cell[...] = cell + value if t.op == "reduce" else value
            stage_seconds.append(time.monotonic() - t0)
    finally:
        links.close()
        pool.shutdown(wait=True)
    if not return_stats:
        return result
    by_level = [sum(v for (_, l), v in links.sent.items() if l == level) for level in range(levels)]
    return result, {"bytes_sent": sum(links.sent.values()), "payload_bytes_sent": sum(links.payload.values()),
                    "bytes_sent_by_level": by_level, "connections": {"out": len(outs), "in": len(ins)},
                    "setup_seconds": setup, "stage_seconds": stage_seconds,
                    "total_seconds": time.monotonic() - start}
