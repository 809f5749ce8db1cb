"""The liveness probe in a process of its own: its sweep never waits for the session's GIL.

Why: the probe (emulation/switch_probe.py) used to be a thread of the session's process, and
at 128 hosts that process also recomputes routes and reroutes in Python. Every system call of
the probe's sweep (a send, a /proc read per switch) then waited for the GIL: the probe no longer
invents hangs from that (a ping's clock starts when it was sent), but a real hang was seen late,
by as much as the controller's longest stretch of Python. Here the same SwitchProbe runs in a
child Python process (`python -m agglab.emulation.probe_process BOUND INTERVAL`) with nothing
else to do; the session only reads what it declares.

The child is started by the thread that built the network, so it is in the run's network and
mount namespaces as the switches are (ground/netns.py: a process inherits the namespaces of the
thread that starts it), and reaches their control sockets and Thrift ports as the session does.
It is a session of its own (a Ctrl-C at the terminal is the parent's to handle, and the kernel's
autogroups give it a share of its own) and ends when its stdin closes: at stop(), and when the
session's process dies however it dies (and with lifeline's PR_SET_PDEATHSIG where it applies).

Protocol, one JSON object a line:
  session -> probe (stdin)   {"add": NAME, "kind": "soft", "path": P, "pid": N|null, "bound": S|null}
                             {"add": NAME, "kind": "thrift", "host": H, "port": N, "pid": N|null, "bound": S|null}
                             {"remove": NAME}
  probe -> session (stdout)  {"answered": NAME, "yes": true|false}   (first answer; channel dropped)
                             {"hung": NAME, "last": T, "t": T}       (time.monotonic(): one clock machine-wide)
A channel the child cannot open (the switch is gone) is left to the exit watcher, as before.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading

from agglab.emulation.switch_probe import HANG_BOUND, PING_INTERVAL, HangCallback, SoftPing, SwitchProbe, ThriftPing
from agglab.ground import lifeline
from agglab.ground.paths import IMPORT_ROOT

STOP_WAIT = 10.0          # seconds the child has to end once its stdin closed, before SIGKILL


def channel_spec(chan) -> dict:
    """What the child needs to open the same ping channel as `chan` (SoftPing, ThriftPing)."""
    common = {"pid": getattr(chan, "pid", None), "bound": getattr(chan, "bound", None)}
    if isinstance(chan, SoftPing):
        return {"kind": "soft", "path": chan.path, **common}
    if isinstance(chan, ThriftPing):
        return {"kind": "thrift", "host": chan.host, "port": chan.port, **common}
    raise TypeError(f"no ping channel a probe process can open: {type(chan).__name__}")


def open_channel(spec: dict):
    """The ping channel `spec` (channel_spec) describes, opened here."""
    if spec["kind"] == "soft":
        chan = SoftPing(spec["path"], spec.get("pid"))
    else:
        chan = ThriftPing(spec["port"], host=spec["host"], pid=spec.get("pid"))
    if spec.get("bound"):
        chan.bound = spec["bound"]
    return chan


class ProbeProcess:
    """SwitchProbe's interface (start, add, remove, has_answered, stop) over a child process:
    `on_hang(name, last_answer, t)` is called in a thread of its own for each switch the child
    declares hung, after which the child no longer pings it."""

    def __init__(self, on_hang: HangCallback, bound: float = HANG_BOUND, interval: float = PING_INTERVAL):
        self.on_hang, self.bound, self.interval = on_hang, bound, interval
        self.proc: subprocess.Popen | None = None
        self._answered: set[str] = set()
        self._lock = threading.Lock()          # _answered
        self._write = threading.Lock()         # the child's stdin (never held while _read waits)
        self._stopping = False
        self._reader: threading.Thread | None = None

    def start(self) -> "ProbeProcess":
        env = dict(os.environ, PYTHONPATH=str(IMPORT_ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
        self.proc = subprocess.Popen([sys.executable, "-m", "agglab.emulation.probe_process", repr(self.bound),
                                      repr(self.interval)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     env=env, cwd=IMPORT_ROOT, start_new_session=True, close_fds=True,
                                     preexec_fn=lifeline.preexec())
        self._reader = threading.Thread(target=self._read, name="switch-probe-reader", daemon=True)
        self._reader.start()
        return self

    def add(self, name: str, channel) -> None:
        """Ping switch `name` from now on over a channel like `channel` (SoftPing, ThriftPing),
        which the child opens itself; `channel` (which proved the switch reachable) is closed."""
        spec = channel_spec(channel)
        channel.sock.close()
        with self._lock:
            self._answered.discard(name)
        self._tell({"add": name, **spec})

    def remove(self, name: str) -> None:
        with self._lock:
            self._answered.discard(name)
        self._tell({"remove": name})

    def has_answered(self, name: str) -> bool:
        """Whether `name` answered a ping on its current channel (before that it is never judged)."""
        with self._lock:
            return name in self._answered

    def _tell(self, message: dict) -> None:
        with self._write:
            if self.proc is None or self._stopping:
                return
            try:
                self.proc.stdin.write((json.dumps(message) + "\n").encode())
                self.proc.stdin.flush()
            except (BrokenPipeError, ValueError):    # the child is gone: _read has said so
                pass

    def _read(self) -> None:
        for line in self.proc.stdout:
            try:
                msg = json.loads(line)
            except ValueError:
                continue
            if "hung" in msg:
                threading.Thread(target=self.on_hang, args=(msg["hung"], msg["last"], msg["t"]),
                                 name=f"hung-{msg['hung']}", daemon=True).start()
            elif "answered" in msg:
                with self._lock:
                    (self._answered.add if msg["yes"] else self._answered.discard)(msg["answered"])
        code = self.proc.wait()
        if not self._stopping:
            print(f"agglab: the switch liveness probe ended (exit code {code}): hung switches are no longer "
                  "detected in this run", file=sys.stderr, flush=True)

    def stop(self) -> None:
        """End the child (its stdin closes; SIGKILL if it has not ended within STOP_WAIT) and
        reap it: no process is left behind."""
        with self._write:
            if self.proc is None or self._stopping:
                return
            self._stopping = True
            try:
                self.proc.stdin.close()
            except OSError:
                pass
        try:
            self.proc.wait(STOP_WAIT)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        if self._reader is not None:
            self._reader.join(STOP_WAIT)
        self.proc.stdout.close()


# -- the child ------------------------------------------------------------------------------
def main(argv: list[str]) -> int:
    bound, interval = float(argv[0]), float(argv[1])
    out, out_lock = sys.stdout, threading.Lock()

    def say(message: dict) -> None:
        with out_lock:
            try:
                out.write(json.dumps(message) + "\n")
                out.flush()
            except (BrokenPipeError, ValueError):    # the session is gone: stdin's end follows
                pass

    probe = SwitchProbe(lambda name, last, t: say({"hung": name, "last": last, "t": t}), bound=bound,
                        interval=interval, on_answered=lambda name, yes: say({"answered": name, "yes": yes}))
    probe.start()
    try:
        for line in sys.stdin:
            try:
                msg = json.loads(line)
            except ValueError:
                continue
            if "remove" in msg:
                probe.remove(msg["remove"])
            elif "add" in msg:
                try:
                    probe.add(msg["add"], open_channel(msg))
                except OSError:                      # gone before it could be pinged: the watcher's case
                    pass
    finally:
        probe.stop()
    return 0


if __name__ == "__main__":
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)     # the session's terminal is the session's
    sys.exit(main(sys.argv[1:]))
