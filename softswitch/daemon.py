"""The software switch process: raw-socket ports + P4 pipeline + control socket, one event loop.

Why one thread: the pipeline's tables and registers are touched by packets
and by control commands; serving both from one epoll loop (control between
packet batches) makes every command atomic with respect to packets without
locks, exactly like BMv2's single-threaded runtime updates appear to P4.

The per-frame path (`_make_drain`) is written for speed: everything it needs
is bound to locals once per port, frames are received into one preallocated
buffer and handed whole to the pipeline's `process_batch` as numpy rows
(softswitch/batch.py: a batch of dense first contributions in a few numpy
calls, results staged into the send arenas with one copy per port); where it
declines, the frames go through `process` one at a time (one `bytes` copy each).
Counters are plain list slots.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import select
import signal
import socket
import time
from pathlib import Path

import numpy as np

from ground.priority import HOLD_RT, not_real_time, real_time
from softswitch.control import ControlServer
from ground.mmsg import MsgBatch
from softswitch.io import MAX_FRAME, TX_SLOT, RawPort
from softswitch.pcap import PcapWriter

try:                                          # refusals of the CLI carry BMv2's wording already
    from softswitch.cli import CommandError as _Refusal
except ImportError:                           # pragma: no cover - pipeline not installed
    _Refusal = ()

COUNTERS = ("rx", "rx_bytes", "tx", "tx_bytes", "drop", "tx_drop", "err", "batched")
# batched: received frames Pipeline.process_batch took (softswitch/batch.py), by ingress port
NPORTS = 512                                  # bit<9> port space
# Fewer frames than this go through Pipeline.process one by one even where process_batch
# would take them: its fixed cost (some 50 numpy calls, ~40-90 us) beats the per-frame loop
# (~5-8 us a frame) only from about 8-16 frames on (in-process, this 2-CPU machine); at low
# rates a port's batch is a frame or two, and that must not cost more than before.
BATCH_MIN = 12
# `ports_hold MS`: the longest a controller may stop the ports (a hold ends by itself, so a
# controller that dies mid-reroute cannot leave a switch deaf)
HOLD_MAX_MS = 10_000


class Daemon:
    """One switch: `ports` maps port number -> interface name; `pipeline` has process()/command()."""

    def __init__(self, name: str, ports: dict[int, str], control: str | Path, pipeline, *,
                 log: logging.Logger, pcap_dir: str | Path | None = None,
                 pidfile: str | Path | None = None, batch: int = 64,
                 stats_interval: float = 10.0, flush_interval: float = 1.0,
                 prepare_ports: bool = True):
        bad = [p for p in ports if not 0 <= p < NPORTS]
        if bad:
            raise ValueError(f"port numbers must be in 0..{NPORTS - 1}, got {bad}")
        self.name, self.port_names, self.control_path = name, dict(ports), str(control)
        self.pipeline, self.log = pipeline, log
        self.pcap_dir = Path(pcap_dir) if pcap_dir else None
        self.pidfile = Path(pidfile) if pidfile else None
        self.batch, self.stats_interval, self.flush_interval = batch, stats_interval, flush_interval
        self.prepare_ports = prepare_ports
        self.counters = {c: [0] * NPORTS for c in COUNTERS}
        self.no_port = 0                          # outputs to ports this switch does not have
        self.ports: dict[int, RawPort] = {}
        self._tx: dict[int, list[bytes]] = {}          # egress port -> frames waiting for the flush
        self._tx_batch: dict[int, MsgBatch] = {}
        self._pcap_in: dict[int, PcapWriter] = {}
        self._pcap_out: dict[int, PcapWriter | None] = {}
        self._rx = MsgBatch(batch, MAX_FRAME)          # shared by all ports: one drain at a time
        self._ep = select.epoll()
        self._ctl_ep = select.epoll()                  # the control socket's fds only: see _loop
        self._handlers: dict[int, object] = {}
        self._control: ControlServer | None = None
        self._wake = socket.socketpair()
        self._last_err = 0.0
        self._suppressed = 0
        self.running = False
        self._stop_requested = False
        self._held_until = 0.0                         # ports_hold: frames wait until then
        self._held_log: list[tuple] = []               # commands served while held, logged after
        self._held_rt = False                          # the hold runs real-time

    # ---- event-loop plumbing -------------------------------------------------------------
    def _register(self, fd: int, events: int, callback) -> None:
        self._handlers[fd] = callback
        self._ep.register(fd, events)

    def _modify(self, fd: int, events: int) -> None:
        self._ep.modify(fd, events)

    def _unregister(self, fd: int) -> None:
        if self._handlers.pop(fd, None) is not None:
            self._ep.unregister(fd)

    # the control socket's fds are in both epolls: the main one wakes the loop, the other is
    # polled (without waiting) after every port's batch, so a command waits for one batch at
    # most, not for every port's (a reroute waits for the slowest of 20 switches' answers)
    def _register_ctl(self, fd: int, events: int, callback) -> None:
        self._register(fd, events, callback)
        self._ctl_ep.register(fd, events)

    def _modify_ctl(self, fd: int, events: int) -> None:
        self._ep.modify(fd, events)
        self._ctl_ep.modify(fd, events)

    def _unregister_ctl(self, fd: int) -> None:
        if fd in self._handlers:
            self._ctl_ep.unregister(fd)
        self._unregister(fd)

    def _serve_control(self) -> None:
        handlers = self._handlers
        for fd, events in self._ctl_ep.poll(0):
            handler = handlers.get(fd)
            if handler is not None:
                handler(events)

    # ---- lifecycle -----------------------------------------------------------------------
    def run(self) -> int:
        """Start, serve until SIGTERM/SIGINT/`shutdown`, clean up; returns the exit code."""
        code = 0
        try:
            self._start()
            self._loop()
        except Exception:
            self.log.exception("fatal error")
            code = 1
        finally:
            self._stop()
        return code

    def _start(self) -> None:
        self.log.info("starting %s pid=%d ports=%s control=%s pcap=%s", self.name, os.getpid(),
                      self.port_names, self.control_path, self.pcap_dir)
        # Signals first: a SIGTERM while ports are being set up must still clean up.
        signal.signal(signal.SIGTERM, self._on_signal)
        signal.signal(signal.SIGINT, self._on_signal)
        if self.pidfile:
            self.pidfile.parent.mkdir(parents=True, exist_ok=True)
            self.pidfile.write_text(f"{os.getpid()}\n")
        for number, ifname in sorted(self.port_names.items()):
            port = RawPort(number, ifname, prepare=self.prepare_ports)
            self.ports[number] = port
            self._tx[number] = []
            self._tx_batch[number] = port.tx_batch(batch=self.batch)
            self.log.info("port %d = %s (%s)", number, ifname, ", ".join(port.notes) or "ok")
        if self.pcap_dir:
            self.pcap_dir.mkdir(parents=True, exist_ok=True)
            for number, port in self.ports.items():
                self._pcap_in[number] = PcapWriter(self.pcap_dir / f"{port.ifname}_in.pcap")
                self._pcap_out[number] = PcapWriter(self.pcap_dir / f"{port.ifname}_out.pcap")
        for port in self.ports.values():
            self._register(port.fileno(), select.EPOLLIN, self._make_drain(port))
        for s in self._wake:
            s.setblocking(False)
        self._register_ctl(self._wake[0].fileno(), select.EPOLLIN, self._on_wake)   # a signal ends a held poll too
        signal.set_wakeup_fd(self._wake[1].fileno(), warn_on_full_buffer=False)
        # The control socket comes last: once it answers, the switch is fully up.
        self._control = ControlServer(self.control_path, self._command,
                                      self._register_ctl, self._modify_ctl, self._unregister_ctl)
        self.running = not self._stop_requested
        self.log.info("ready")

    def _on_signal(self, signum, _frame) -> None:
        self.log.info("received %s, shutting down", signal.Signals(signum).name)
        self.running = False
        self._stop_requested = True

    def _on_wake(self, _events: int) -> None:
        try:
            while self._wake[0].recv(64):
                pass
        except BlockingIOError:
            pass

    def _loop(self) -> None:
        poll, handlers, flush = self._ep.poll, self._handlers, self._flush_tx
        now = time.monotonic()
        next_flush, next_stats = now + self.flush_interval, now + self.stats_interval
        last_stats = None
        serve_control = self._serve_control
        while self.running:
            timeout = max(0.0, min(next_flush, next_stats) - time.monotonic())
            if self._held_until:
                self._serve_held(timeout)
            else:
                ready = poll(timeout)
                if len(ready) > 1:
                    serve_control()          # commands first, then after each port's batch:
                for fd, events in ready:     # they wait one port's batch at most
                    if self._held_until:
                        break                # a hold began: the ports wait, commands go on
                    handler = handlers.get(fd)
                    if handler is not None:
                        handler(events)
                        if len(ready) > 1:
                            serve_control()
            flush()                        # every port's outputs of this turn: one sendmmsg each
            now = time.monotonic()
            if now >= next_flush:
                next_flush = now + self.flush_interval
                self._flush_pcaps()
            if now >= next_stats:
                next_stats = now + self.stats_interval
                last_stats = self._log_stats(last_stats)

    def _serve_held(self, timeout: float) -> None:
        """One turn while the ports are held (`ports_hold`): the control socket only, until
        `ports_release` or the hold's deadline; frames wait in the kernel's queues."""
        left = self._held_until - time.monotonic()
        if left <= 0:
            self._release()
            return
        handlers = self._handlers
        for fd, events in self._ctl_ep.poll(min(timeout, left)):
            handler = handlers.get(fd)
            if handler is not None:
                handler(events)

    def _stop(self) -> None:
        self.running = False
        self._release()                           # log what a hold kept back
        if self._control is not None:
            self._control.close()
            self._control = None
        signal.set_wakeup_fd(-1)
        for port in self.ports.values():
            port.close()
        for writer in [*self._pcap_in.values(), *self._pcap_out.values()]:
            writer.close()
        for s in self._wake:
            s.close()
        self._ep.close()
        self._ctl_ep.close()
        if self.ports:
            self._log_stats(None)
        if self.pidfile:
            try:
                self.pidfile.unlink()
            except FileNotFoundError:
                pass
        self.log.info("stopped")

    # ---- the per-frame path --------------------------------------------------------------
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
                if n >= BATCH_MIN and batched is not None:
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
                for i in range(n):
                    start = i * slot
                    frame = bytes(view[start:start + words[16 * i + 14]])
                    nbytes += len(frame)
                    if pcap_in is not None:
                        pcap_in.write(frame)
                    try:
                        outs = process(iport, frame)
                    except Exception as exc:
                        self._pipeline_error(iport, frame, exc)
                        continue
                    if not outs:
                        ndrop += 1
                        continue
                    for eport, out in outs:
                        queue = queues.get(eport)
                        if queue is None:
                            self._no_port(eport)
                            continue
                        queue.append(out)
                        if pcap_in is not None:
                            pcap_out[eport].write(out)
            finally:
                rx_c[iport] += n
                rxb[iport] += nbytes
                drop[iport] += ndrop
        return drain

    def _flush_tx(self) -> None:
        """Send every port's queued frames, one sendmmsg per port and up to `batch` frames.

        A queue holds frames (bytes) and, from the batch path, uint8 arrays of equal-length
        frames (one per row), which are copied into the send arena a block at a time."""
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

    # ---- control -------------------------------------------------------------------------
    def _command(self, line: str) -> tuple[bool, str]:
        """Daemon commands first, everything else goes to the pipeline's CLI."""
        word = line.split(None, 1)[0]
        try:
            if word == "ping":
                ok, out = True, "pong"
            elif word == "port_stats":
                ok, out = True, json.dumps(self.port_stats(), sort_keys=True)
            elif word == "pcap_flush":
                self._flush_pcaps()
                ok, out = True, f"flushed {len(self._pcap_in) * 2} pcap files"
            elif word == "shutdown":
                self.running = False
                ok, out = True, "shutting down"
            elif word == "ports_hold":
                ok, out = self._hold(line)
            elif word == "ports_release":
                ok, out = True, "released" if self._held_until else "not held"
                self._release()
            else:
                ok, out = True, self.pipeline.command(line)
        except Exception as exc:
            ok, out = False, _error_text(exc)
        if ok and word in QUIET:
            return ok, out                    # a reroute's bulk register traffic: 20 switches, 2 cores
        if self._held_until:                  # logged when the hold ends (two thirds of a command's cost)
            self._held_log.append((time.time(), line, ok, out))
        else:
            self._log_command(line, ok, out)
        return ok, out

    def _log_command(self, line: str, ok: bool, out: str, when: float | None = None) -> None:
        shown = out if len(out) <= 2000 else out[:2000] + f"... ({len(out)} chars)"
        said = line if len(line) <= 300 else line[:300] + f"... ({len(line)} chars)"
        if when is None:
            self.log.info("cmd %r -> %s %s", said, "ok" if ok else "ERROR", shown)
            return
        record = self.log.makeRecord(self.log.name, logging.INFO, __file__, 0, "cmd %r -> %s %s",
                                     (said, "ok" if ok else "ERROR", shown), None)
        record.created, record.msecs = when, (when - int(when)) * 1000
        self.log.handle(record)

    def _release(self) -> None:
        """End a hold: the ports are read again and the commands served meanwhile are logged
        (with the time each ran)."""
        if self._held_until:
            not_real_time()               # real time is for holds only, whoever raised it
        self._held_until = 0.0
        self._held_rt = False
        held, self._held_log = self._held_log, []
        for when, line, ok, out in held:
            self._log_command(line, ok, out, when)

    def _hold(self, line: str) -> tuple[bool, str]:
        """`ports_hold MS`: receive no frames for at most MS ms (until `ports_release`), at
        real-time priority where allowed (ground/priority.py): the switch does nothing but
        serve its control socket meanwhile, and serves it at once."""
        try:
            ms = float(line.split()[1])
        except (IndexError, ValueError):
            return False, f"usage: ports_hold MS (at most {HOLD_MAX_MS})"
        if not 0 < ms <= HOLD_MAX_MS:
            return False, f"ports_hold: {ms:g} ms is not in (0, {HOLD_MAX_MS}]"
        if not self._held_until:
            self._held_rt = real_time(0, HOLD_RT) or os.sched_getscheduler(0) == os.SCHED_FIFO
        self._held_until = time.monotonic() + ms / 1e3
        return True, f"held for at most {ms:g} ms" + (", real time" if self._held_rt else "")

    def port_stats(self) -> dict[str, dict]:
        """Per-port counters keyed by port number (string, as JSON needs)."""
        c = self.counters
        out = {str(p): {"ifname": port.ifname, **{k: c[k][p] for k in COUNTERS}}
               for p, port in sorted(self.ports.items())}
        if self.no_port:
            out["no_port"] = {"tx_drop": self.no_port}
        return out

    def _flush_pcaps(self) -> None:
        for writer in [*self._pcap_in.values(), *self._pcap_out.values()]:
            writer.flush()

    def _log_stats(self, last):
        stats = self.port_stats()
        if stats != last:
            self.log.info("stats %s", " ".join(
                f"{p}:" + ",".join(f"{k}={v}" for k, v in s.items() if k != "ifname")
                for p, s in stats.items()))
        return stats


# Commands logged only when they fail: the binary register reads and writes of a reroute (their
# lines are base64), which come by the dozen per switch while every switch's answer is awaited.
QUIET = frozenset({"register_read_runs", "register_write_runs", "register_write_cells"})


def _error_text(exc: Exception) -> str:
    """A refused command is reported in the CLI's own words; anything else names the exception."""
    if isinstance(exc, _Refusal) and str(exc):
        return str(exc)
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
