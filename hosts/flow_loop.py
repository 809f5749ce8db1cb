"""All of a worker's TCP flows driven by one thread and a selector (the parameter server's engine).

Why: a parameter server of n workers has 2(n-1) connections per worker, and each carries a
flow each way. One blocking thread per flow is 4(n-1) threads a worker: 65,280 threads for a
128-worker PS on one machine, whose start-up alone starves the emulated switches long enough
for their liveness probe to take them for hung. One non-blocking loop per worker does the same
work with one thread: what a thread per flow bought (a flow slowed by its receiver never holds
up the others on the same uplink) a selector gives as well, since it writes to whichever
socket has room and reads whichever has data.

The frames are tcp_peer's: (tag = message number on this direction, byte count), then the
payload; every message is checked against what the caller said comes next on that socket,
and when none of the worker's flows moved for `give_up` seconds the allreduce ends with an
AllreduceTimeout naming the peer and the message that waited longest, as a blocking socket's
timeout did (`_check_stalls`: why the whole loop; a send side whose socket is full counts as
moving while its peer acknowledges bytes, hosts/tcp_acked.py)."""

from __future__ import annotations

import selectors
import time
from collections import deque
from itertools import islice

from agglab.hosts import tcp_acked
from agglab.hosts.diagnostics import AllreduceTimeout
from agglab.hosts.tcp_mesh import Mesh
from agglab.hosts.tcp_peer import FRAME_STRUCT, Peer, PeerError

_BATCH = 64            # buffers per sendmsg call (well under IOV_MAX)


class _Flow:
    """One socket's state: frames queued to send, messages expected in order, and when each
    direction last moved (for the no-progress timeout)."""

    def __init__(self, peer: Peer):
        self.peer = peer
        self.sendq: deque[memoryview] = deque()
        self.expected: deque[tuple[memoryview, str, object]] = deque()
        self.header = bytearray(FRAME_STRUCT.size)
        self.got = 0                 # bytes of the current header (in_header) or payload
        self.in_header = True
        self.last_tx = self.last_rx = time.monotonic()
        self.acked = tcp_acked.bytes_acked(peer.sock) or 0   # the peer's acknowledged bytes at the last check
        self.mask = 0


class FlowLoop:
    """Framed, non-blocking messages over every socket of a mesh, from the calling thread.

    `send(peer, payload)` queues a message, `expect(peer, buffer, what, then)` says the next
    message from that peer fills `buffer` and calls `then()` once it is in; both may be called
    from callbacks while `run` is going. `run()` returns when every expected message arrived and
    every queued byte went to the kernel. `on_bytes(n)`, if given, is told every n payload bytes
    as they are read (a caller's progress by bytes, not messages: hosts/ps.py)."""

    def __init__(self, mesh: Mesh, give_up: float, me: int, on_bytes=None):
        self.give_up, self.me, self.on_bytes = give_up, me, on_bytes
        self.selector = selectors.DefaultSelector()
        self.flows = {id(p): _Flow(p) for p in mesh.peers()}
        for flow in self.flows.values():
            flow.peer.sock.setblocking(False)

    def _flow(self, peer: Peer) -> _Flow:
        return self.flows[id(peer)]

    def send(self, peer: Peer, payload) -> None:
        view = memoryview(payload).cast("B")
        flow = self._flow(peer)
        if not flow.sendq:
            flow.last_tx = time.monotonic()        # the clock runs while bytes wait
        flow.sendq.append(memoryview(FRAME_STRUCT.pack(peer.sent, view.nbytes)))
        if view.nbytes:
            flow.sendq.append(view)
        peer.sent += 1
        peer.bytes_sent += view.nbytes
        self._watch(flow)

    def expect(self, peer: Peer, out, what: str, then) -> None:
        flow = self._flow(peer)
        if not flow.expected:
            flow.last_rx = time.monotonic()
        flow.expected.append((memoryview(out).cast("B"), what, then))
        self._watch(flow)

    def run(self) -> None:
        try:
            while any(f.mask for f in self.flows.values()):
                for key, events in self.selector.select(self._wait()):
                    flow = key.data
                    if events & selectors.EVENT_READ:
                        self._read(flow)
                    if events & selectors.EVENT_WRITE and flow.sendq:
                        self._write(flow)
                    self._watch(flow)
                self._check_stalls()
        finally:
            self.selector.close()

    # -- internals -------------------------------------------------------------------
    def _watch(self, flow: _Flow) -> None:
        """Register the socket for what it has pending: reading while messages are expected,
        writing while bytes are queued; no interest at all once both are done."""
        mask = (selectors.EVENT_READ if flow.expected else 0) | (selectors.EVENT_WRITE if flow.sendq else 0)
        if mask == flow.mask:
            return
        if not flow.mask:
            self.selector.register(flow.peer.sock, mask, flow)
        elif not mask:
            self.selector.unregister(flow.peer.sock)
        else:
            self.selector.modify(flow.peer.sock, mask, flow)
        flow.mask = mask

    def _wait(self) -> float:
        """Until the loop could be out of patience: give_up after its last progress (a
        selector tick, at least)."""
        if not any(f.expected or f.sendq for f in self.flows.values()):
            return self.give_up
        return max(0.01, self._last_progress() + self.give_up - time.monotonic())

    def _last_progress(self) -> float:
        """When any flow last moved: a byte read or written, new work queued, or (below) the
        peer acknowledging bytes of a send side whose socket is full."""
        return max((max(f.last_rx, f.last_tx) for f in self.flows.values()), default=time.monotonic())

    def _check_stalls(self) -> None:
        """Give up only when none of the worker's flows moved for give_up seconds, naming the
        flow that has waited longest. Why the whole loop and not each flow: a parameter server's
        worker waits for a shard's sum while that shard's owner pushes and pulls 14 flows over
        one slow uplink, and a TCP flow there can sit out RTO back-offs longer than give_up
        while every other flow moves (8 x 4 MiB at 1.25 Mb/s gave up every time); a failed,
        unrerouted link stops every flow soon after, as the in-network agents' rule (no progress
        of the call) sees it."""
        now = time.monotonic()
        for f in self.flows.values():
            if f.sendq and now - f.last_tx > self.give_up:
                acked = tcp_acked.bytes_acked(f.peer.sock)
                if acked is not None and acked > f.acked:    # the kernel still moves its bytes: a share of a slow link
                    f.acked, f.last_tx = acked, now
        if now - self._last_progress() <= self.give_up:
            return
        waiting = ([(f.last_rx, "rx", f) for f in self.flows.values() if f.expected]
                   + [(f.last_tx, "tx", f) for f in self.flows.values() if f.sendq])
        if not waiting:
            return
        _, kind, f = min(waiting, key=lambda w: w[0])
        p = f.peer
        if kind == "rx":
            view, what, _ = f.expected[0]
            part = "header" if f.in_header else f"{f.got}/{view.nbytes} bytes"
            raise AllreduceTimeout(f"rank {self.me}: no data from {p.name} for {self.give_up:g} s while "
                                   f"receiving {what} ({part} of message {p.received})")
        raise AllreduceTimeout(f"rank {self.me}: {p.name} accepted no data for {self.give_up:g} s "
                               f"({sum(v.nbytes for v in f.sendq)} bytes queued): peer stalled or "
                               f"unreachable (failed link not rerouted?)")

    def _write(self, flow: _Flow) -> None:
        p = flow.peer
        while flow.sendq:
            try:
                n = p.sock.sendmsg(list(islice(flow.sendq, _BATCH)))
            except BlockingIOError:
                return
            except OSError as exc:
                raise PeerError(f"rank {self.me}: sending to {p.name} failed: {exc}") from exc
            flow.last_tx = time.monotonic()
            while n:
                head = flow.sendq[0]
                if n >= head.nbytes:
                    n -= head.nbytes
                    flow.sendq.popleft()
                else:
                    flow.sendq[0] = head[n:]
                    n = 0

    def _read(self, flow: _Flow) -> None:
        p = flow.peer
        while flow.expected:
            view, what, then = flow.expected[0]
            target = memoryview(flow.header) if flow.in_header else view
            if flow.got < target.nbytes:
                try:
                    n = p.sock.recv_into(target[flow.got:])
                except BlockingIOError:
                    return
                except OSError as exc:
                    raise PeerError(f"rank {self.me}: receiving {what} from {p.name} failed: {exc}") from exc
                if n == 0:
                    raise PeerError(f"rank {self.me}: {p.name} closed the connection while this worker "
                                    f"waited for {what} (did it fail? see its own error)")
                flow.got += n
                flow.last_rx = time.monotonic()
                if self.on_bytes is not None and not flow.in_header:
                    self.on_bytes(n)
                if flow.got < target.nbytes:
                    continue
            if flow.in_header:
                tag, nbytes = FRAME_STRUCT.unpack(flow.header)
                if tag != p.received or nbytes != view.nbytes:
                    raise PeerError(f"rank {self.me}: {p.name} sent message {tag} of {nbytes} bytes, expected "
                                    f"message {p.received} of {view.nbytes} bytes ({what}): protocol out of step")
                flow.in_header, flow.got = False, 0
                continue
            flow.in_header, flow.got = True, 0
            p.received += 1
            flow.expected.popleft()
            then()
