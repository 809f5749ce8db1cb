"""The switch daemon's control commands (softswitch/daemon.py): its own, and the pipeline's CLI.

Why its own module: the daemon answers a few commands itself (`ping`, `port_stats`,
`pcap_flush`, `shutdown`, and `ports_hold MS` / `ports_release`, which stop and restart
reading the ports around a reroute's install), hands every other line to the pipeline's CLI,
and decides what of it is logged and when: a hold's commands are logged after the hold, a
reroute's bulk register traffic only when it fails. The control socket itself is
softswitch/control.py; the daemon serves it between packet batches.

`DaemonCommands` is a part of `Daemon`, not a class of its own: it uses the daemon's state
(`pipeline`, `running`, `log`, `_pcap_in`, `_held_until`, `_held_log`, `_held_rt`) and its
`port_stats` and `_flush_pcaps`.
"""

from __future__ import annotations

import json
import logging
import os
import time

from agglab.ground.priority import HOLD_RT, not_real_time, real_time

try:                                          # refusals of the CLI carry BMv2's wording already
    from agglab.softswitch.cli import CommandError as _Refusal
except ImportError:                           # pragma: no cover - pipeline not installed
    _Refusal = ()

# `ports_hold MS`: the longest a controller may stop the ports (a hold ends by itself, so a
# controller that dies mid-reroute cannot leave a switch deaf)
HOLD_MAX_MS = 10_000

# Commands logged only when they fail: the binary register reads and writes of a reroute (their
# lines are base64), which come by the dozen per switch while every switch's answer is awaited.
QUIET = frozenset({"register_read_runs", "register_write_runs", "register_write_cells"})


class DaemonCommands:
    """`_command`, the control socket's handler, and the port hold it serves."""

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


def _error_text(exc: Exception) -> str:
    """A refused command is reported in the CLI's own words; anything else names the exception."""
    if isinstance(exc, _Refusal) and str(exc):
        return str(exc)
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
