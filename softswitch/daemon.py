"""The software switch process: raw-socket ports + P4 pipeline + control socket, one event loop.

Why one thread: the pipeline's tables and registers are touched by packets
and by control commands; serving both from one epoll loop (control between
packet batches) makes every command atomic with respect to packets without
locks, exactly like BMv2's single-threaded runtime updates appear to P4.

This module is the process: its state, the event loop and its start and stop. The per-frame
path, written for speed, is softswitch/daemon_frames.py (`FramePath`); the commands the
daemon answers itself and the port hold are softswitch/daemon_commands.py (`DaemonCommands`).
"""

from __future__ import annotations

import logging
import os
import select
import signal
import socket
import time
from pathlib import Path

from agglab.ground.links import SWITCH_COALESCE_BATCH as COALESCE_BATCH
from agglab.softswitch import native
from agglab.softswitch.control import ControlServer
from agglab.ground.mmsg import MsgBatch
from agglab.softswitch.daemon_commands import DaemonCommands
from agglab.softswitch.daemon_frames import FramePath
from agglab.softswitch.io import MAX_FRAME, RawPort
from agglab.softswitch.pcap import PcapWriter

COUNTERS = ("rx", "rx_bytes", "tx", "tx_bytes", "drop", "tx_drop", "err", "batched")
# batched: received frames Pipeline.process_batch (softswitch/batch.py) or the C engine
# (softswitch/native.py) took, by ingress port
NPORTS = 512                                  # bit<9> port space


class Daemon(FramePath, DaemonCommands):
    """One switch: `ports` maps port number -> interface name; `pipeline` has process()/command()."""

    def __init__(self, name: str, ports: dict[int, str], control: str | Path, pipeline, *,
                 log: logging.Logger, pcap_dir: str | Path | None = None,
                 pidfile: str | Path | None = None, batch: int = 64,
                 stats_interval: float = 10.0, flush_interval: float = 1.0,
                 prepare_ports: bool = True, coalesce: float = 0.0):
        bad = [p for p in ports if not 0 <= p < NPORTS]
        if bad:
            raise ValueError(f"port numbers must be in 0..{NPORTS - 1}, got {bad}")
        self.name, self.port_names, self.control_path = name, dict(ports), str(control)
        self.pipeline, self.log = pipeline, log
        self.pcap_dir = Path(pcap_dir) if pcap_dir else None
        self.pidfile = Path(pidfile) if pidfile else None
        self.batch, self.stats_interval, self.flush_interval = batch, stats_interval, flush_interval
        self.prepare_ports = prepare_ports
        # after a turn of fewer than COALESCE_BATCH frames, wait this long before looking again
        # (ground/links.py switch_coalesce: frames of slow links gather into fewer wake-ups)
        self.coalesce = coalesce
        self._turn = 0                                 # frames received in this loop turn
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
        nat = getattr(pipeline, "native", None)        # the C engine (softswitch/native.py) or None
        self._engine = nat.engine if nat is not None and not self.pcap_dir else None
        self._py_queued = False                        # Python-path outputs wait in self._tx

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
        for number, port in self.ports.items():
            if self._engine is not None:
                self._engine.set_fd(number, port.fileno())
            self._register(port.fileno(), select.EPOLLIN, self._make_drain(port))
        self.log.info("%s", native.describe() if self._engine is not None or not self.pcap_dir
                      else "data path: the Python reference pipeline (pcap on: every frame is written)")
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
            if self._turn:
                if self._turn < COALESCE_BATCH and self.coalesce and not self._held_until:
                    time.sleep(self.coalesce)
                self._turn = 0
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
