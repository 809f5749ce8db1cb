"""The per-frame path of the switch daemon (softswitch/daemon.py): receive, pipeline, send.

Why its own module: this is the code every frame runs through, written for speed, and it
reads best on its own. Everything a port's callback needs is bound to locals once per port
(`_make_drain`); frames are received into one preallocated buffer and handed whole to the
pipeline's `process_batch` as numpy rows (softswitch/batch.py: a batch of dense first
contributions in a few numpy calls, results staged into the send arenas with one copy per
port); where it declines, the frames go through `process` one at a time (one `bytes` copy
each). Outputs leave with one sendmmsg per egress port and turn (`_flush_tx`). Counters are
plain list slots; errors on this path are counted always and logged at most once a second.

`FramePath` is a part of `Daemon`, not a class of its own: it uses the daemon's state
(`pipeline`, `batch`, `counters`, `ports`, `no_port`, `_rx`, `_tx`, `_tx_batch`, `_pcap_in`,
`_pcap_out`, `_last_err`, `_suppressed`, `log`), all set in `Daemon.__init__`.
"""

from __future__ import annotations

import errno
import os
import time

import numpy as np

from agglab.ground import wire
from agglab.softswitch import native
from agglab.softswitch.io import RawPort

# Fewer frames than this go through Pipeline.process one by one even where process_batch
# would take them: its fixed cost (some 50 numpy calls, ~40-90 us) beats the per-frame loop
# (~5-8 us a frame) only from about 8-16 frames on (in-process, this 2-CPU machine); at low
# rates a port's batch is a frame or two, and that must not cost more than before.
BATCH_MIN = 12


class FramePath:
    """The port callbacks, the send queues' flush and the rare paths' error counting of `Daemon`."""

    def _make_drain(self, port: RawPort):
        """Build the readable-callback of one port: one batch of up to `batch` frames per call.

        The batch is received with one recvmmsg and handed whole to the pipeline's
        `process_batch` (softswitch/batch.py) where it has one: it vectorises the batch
        when that is exactly P4's per-packet semantics and otherwise declines without
        touching any state; then the frames run through `process` one after another in
        arrival order (exactly the order P4 would see them). Outputs are queued per egress
        port in the order the pipeline emitted them; the event loop sends every port's queue
        with one sendmmsg once all ready ports of its turn are drained (`_flush_tx`)."""
        rx, fd, recv, iport = self._rx, port.fileno(), port.recv_batch, port.port
        view, words, slot, count = rx.view, rx.words, rx.slot, self.batch
        policer = getattr(self.pipeline, "policer", None)      # ports in no job (policer.py)
        process = getattr(self.pipeline, "process_admitted", self.pipeline.process) if policer \
            else self.pipeline.process
        queues = self._tx
        c = self.counters
        rx_c, rxb, drop, batched_c = c["rx"], c["rx_bytes"], c["drop"], c["batched"]
        pcap_in, pcap_out = self._pcap_in.get(iport), self._pcap_out
        # the batch path: the arena as rows of frames and the msg_len of every header, no copies
        batched = getattr(self.pipeline, "process_batch", None)
        rows, lens = rx.rows, rx.received
        # the C engine (softswitch/native.py) where built; not with pcap (it writes every frame)
        nat = self.pipeline.native if self._engine is not None else None
        engine, arena = (nat.engine, rx.arena) if nat is not None else (None, None)
        if nat is not None and recv == port._recv_mmsg:       # the kernel guards are on: C's recvmmsg
            fast_recv, hdr_at = native.recvmmsg, rx._hdr_at    # the MsgBatch's prepared headers

            def recv(_rx, count: int) -> int:
                return fast_recv(fd, hdr_at, count)

        def one(i: int) -> tuple[int, int]:
            """Frame i of the arena through the Python pipeline: (its bytes, 1 if it was dropped)."""
            start = i * slot
            frame = bytes(view[start:start + words[16 * i + 14]])
            if pcap_in is not None:
                pcap_in.write(frame)
            try:
                outs = process(iport, frame)
            except Exception as exc:
                self._pipeline_error(iport, frame, exc)
                return len(frame), 0
            if not outs:
                return len(frame), 1
            for eport, out in outs:
                queue = queues.get(eport)
                if queue is None:
                    self._no_port(eport)
                    continue
                queue.append(out)
                self._py_queued = True
                if pcap_in is not None:
                    pcap_out[eport].write(out)
            return len(frame), 0

        def drain(_events: int) -> None:
            nbytes = ndrop = n = 0
            try:
                n = recv(rx, count)
            except OSError as exc:
                self._rx_error(port, exc)
            try:
                if policer is not None and policer.polices(iport) and n:
                    # the whole batch metered at once; the red tail is dropped uncopied
                    total = int(lens[:n].sum())
                    k = policer.admit(iport, n, total)
                    if k < n:                 # counted here: n is what the pipeline sees
                        rx_c[iport] += n - k
                        rxb[iport] += total - int(lens[:k].sum())
                        drop[iport] += n - k
                        n = k
                    if not n:
                        return
                if nat is None and n >= BATCH_MIN and batched is not None:
                    try:
                        got = batched(iport, rows[:n], lens[:n])
                    except Exception as exc:              # a bug, not a packet: count, go on
                        c["err"][iport] += n
                        self._rate_limited("batched pipeline error on port %d (%d frames): %s: %s",
                                           iport, n, type(exc).__name__, exc)
                        return
                    if got is not None:
                        outs, ndrop = got
                        batched_c[iport] += n
                        nbytes = int(lens[:n].sum())
                        if pcap_in is not None:
                            for i in range(n):
                                pcap_in.write(rows[i, :lens[i]].tobytes())
                        for eport, frames in outs:
                            queue = queues.get(eport)
                            if queue is None:
                                self._no_port(eport, len(frames))
                                continue
                            queue.append(frames)
                            if pcap_in is not None:
                                for row in frames:
                                    pcap_out[eport].write(row.tobytes())
                        return
                if nat is not None:
                    i = 0
                    while i < n:
                        if self._py_queued:           # the Python path's outputs go first
                            self._flush_tx()
                        try:
                            k, d = nat.run(iport, arena, slot, lens, i, n)
                            if k == 0 and engine.staged:  # its output arena is full: send, again
                                self._send_native()
                                k, d = nat.run(iport, arena, slot, lens, i, n)
                        except Exception as exc:      # a bug, not a packet: count, go on
                            c["err"][iport] += n - i
                            self._rate_limited("native path error on port %d: %s: %s", iport,
                                               type(exc).__name__, exc)
                            return
                        if k:
                            i += k
                            ndrop += d
                            nbytes += int(lens[i - k:i].sum()) if k > 1 else int(lens[i - 1])
                            batched_c[iport] += k
                            continue
                        nb, dropped = one(i)
                        nbytes, ndrop, i = nbytes + nb, ndrop + dropped, i + 1
                    return
                for i in range(n):
                    nb, dropped = one(i)
                    nbytes += nb
                    ndrop += dropped
            finally:
                rx_c[iport] += n
                self._turn += n
                rxb[iport] += nbytes
                drop[iport] += ndrop
        return drain

    def _send_native(self) -> None:
        """Send the C engine's staged outputs (one sendmmsg per egress port) and count them."""
        c, frame = self.counters, wire.FRAME_BYTES
        for eport, sent, dropped, err in self._engine.send():
            if err == -1:
                self._no_port(eport, dropped)
                continue
            c["tx"][eport] += sent
            c["tx_bytes"][eport] += sent * frame
            if dropped:
                c["tx_drop"][eport] += dropped - 1
                self._tx_error(eport, OSError(err, os.strerror(err)))

    def _flush_tx(self) -> None:
        """Send every port's queued frames, one sendmmsg per port and up to `batch` frames;
        the C engine's outputs first (they were produced before anything queued here).

        A queue holds frames (bytes) and, from the batch path, uint8 arrays of equal-length
        frames (one per row), which are copied into the send arena a block at a time."""
        if self._engine is not None and self._engine.staged:
            self._send_native()
        self._py_queued = False
        for eport, queue in self._tx.items():
            if queue:
                batch = self._tx_batch[eport]
                slot, view, lens, cap = batch.slot, batch.view, batch.iov_len, batch.count
                staged = 0
                for out in queue:
                    if out.__class__ is np.ndarray:
                        m, n = out.shape
                        if n > slot:                     # not with TX_SLOT >= any MTU frame
                            for row in out:
                                staged = self._send_staged(eport, batch, staged)
                                self._send_one(eport, row.tobytes())
                            continue
                        done = 0
                        while done < m:
                            if staged == cap:
                                staged = self._send_staged(eport, batch, staged)
                            k = min(m - done, cap - staged)
                            batch.rows[staged:staged + k, :n] = out[done:done + k]
                            batch.lengths[staged:staged + k] = n
                            staged += k
                            done += k
                        continue
                    n = len(out)
                    if n > slot:                         # jumbo frame: after the staged ones
                        staged = self._send_staged(eport, batch, staged)
                        self._send_one(eport, out)
                        continue
                    if staged == cap:
                        staged = self._send_staged(eport, batch, staged)
                    start = staged * slot
                    view[start:start + n] = out
                    lens[2 * staged + 1] = n
                    staged += 1
                self._send_staged(eport, batch, staged)
                queue.clear()

    def _send_staged(self, eport: int, batch, staged: int) -> int:
        """sendmmsg the `staged` frames of `batch`; a refused frame is a tx drop. Returns 0."""
        c = self.counters
        done = 0
        while done < staged:
            sent = batch.send(batch.fd, staged, done)
            if sent:
                c["tx"][eport] += sent
                c["tx_bytes"][eport] += int(batch.lengths[done:done + sent].sum())
                done += sent
            if done < staged:                             # frame `done` was refused
                self._tx_error(eport, OSError(batch.errno or errno.ENOBUFS,
                                              os.strerror(batch.errno or errno.ENOBUFS)))
                done += 1
        return 0

    def _send_one(self, eport: int, frame: bytes) -> None:
        try:
            self.ports[eport].sock.send(frame)
        except OSError as exc:
            self._tx_error(eport, exc)
            return
        self.counters["tx"][eport] += 1
        self.counters["tx_bytes"][eport] += len(frame)

    # ---- rare paths: errors are counted always, logged at most once a second -------------
    def _rate_limited(self, msg: str, *args) -> None:
        now = time.monotonic()
        if now - self._last_err < 1.0:
            self._suppressed += 1
            return
        if self._suppressed:
            msg += " (%d similar errors suppressed)"
            args += (self._suppressed,)
        self._last_err, self._suppressed = now, 0
        self.log.error(msg, *args)

    def _pipeline_error(self, iport: int, frame: bytes, exc: Exception) -> None:
        self.counters["err"][iport] += 1
        self._rate_limited("pipeline error on port %d (%d-byte frame %s...): %s: %s", iport,
                           len(frame), frame[:42].hex(), type(exc).__name__, exc)

    def _tx_error(self, eport: int, exc: OSError) -> None:
        self.counters["tx_drop"][eport] += 1
        if not isinstance(exc, BlockingIOError):
            self._rate_limited("send on port %d failed: %s", eport, exc)

    def _rx_error(self, port: RawPort, exc: OSError) -> None:
        self.counters["err"][port.port] += 1
        self._rate_limited("receive on port %d (%s) failed: %s", port.port, port.ifname, exc)

    def _no_port(self, eport: int, frames: int = 1) -> None:
        self.no_port += frames
        self._rate_limited("pipeline sent a frame to port %d, which this switch does not have",
                           eport)
