"""Learn that a switch hangs: a liveness ping to every switch, on connections of its own.

Why: a switch process that stops (SIGSTOP, a wedged BMv2, a deadlock) never exits, so the
pidfd watcher (emulation/switch_watch.py) says nothing; its links stay up, so netlink says
nothing; the workers only resend, and the controller learns of it when one of its commands
times out (30 s) and the run ends in a traceback. A switch that does not answer a ping
within HANG_BOUND is declared hung, and the network then treats it exactly as a dead one
(EmulatedNetwork.watch_switches: fenced, rerouted around, restartable).

The bound. One ping is outstanding per switch; the next goes PING_INTERVAL after the
reply. A switch is hung when its ping has had no reply for HANG_BOUND, so a hang is seen
within HANG_BOUND + PING_INTERVAL = 0.6 s of the switch's last answer. The daemon answers
between receive batches (softswitch/daemon.py: a command waits for one batch at most) and
during `ports_hold`, so a live switch answers in well under a millisecond on an idle
machine; 0.5 s leaves room for a 2-core machine at a load of 50, where a runnable process
waits tens of ms for a CPU. The prober only judges after reading whatever is already in its
sockets, so a prober that was itself starved of CPU never declares a switch hung whose
answer was waiting: starvation delays detection, it does not invent hangs. Nor is a switch
judged before it has answered one ping on the prober's connection: a channel that never
worked (a ping the target does not understand) must not fence a healthy switch.

Starved or busy is not hung. At a hundred workers and as many switches on 2 cores, a live
switch can wait longer than HANG_BOUND for a CPU; fencing it then ends the run with a false
failure. Nor is a live BMv2 switch always quick to answer while it works: its Thrift thread
can wait on a lock a busy thread holds (seen: live BMv2 edges fenced at the start of a
fat-tree allreduce on a loaded machine, the run partitioned). So where the switch's process is
local, the prober reads the time its threads were runnable (/proc/PID/task/*/schedstat, first
two fields: nanoseconds on a CPU and waiting for one, summed over the process's threads): if
that grew by more than STARVED_SHARE of the time since the ping went, the switch was running or
wanted to, and it gets another HANG_BOUND, up to STARVED_LIMIT in all. A stopped (SIGSTOP)
switch never runs, and a deadlocked one (BMv2's port_remove under traffic,
emulation/bmv2_ports.py) has every thread asleep on a lock: neither's time grows, and each is
judged as before; a switch spinning without answering is judged at STARVED_LIMIT.

BMv2's bound. A live simple_switch's Thrift thread can be silent for longer, with none of the
switch's threads running or waiting for a CPU: seen 0.8 and 1.1 s on a 2-core machine 99%
busy, live edges of a BMv2 fat-tree fenced and the run partitioned, about one run in five.
Its threads were asleep, so the starvation test cannot tell that from a deadlock; BMv2's
pings get BMV2_HANG_BOUND instead (a BMv2 hang is seen within about 2.6 s).

The probe's own stalls. The prober was a thread of the session's process, which at 128 hosts
also recomputes routes and reroutes in Python (it now runs in a process of its own,
emulation/probe_process.py, so the session's Python no longer delays a real hang's detection): while such work holds the GIL, every system
call of the probe's sweep (a send, a /proc read per switch) waits up to a switch interval
(5 ms) to get it back, and a sweep over 80 switches could take a second. Each ping's clock used to
start when the sweep began, so a switch pinged at the end of a slow sweep was "late" before
its ping had left, and was judged before it could answer: 59 live switches of a k=8
fat-tree, 52 of them asleep, fenced at one instant right after a link failure (2026-12-06,
docs/measurements.md). A ping's clock now starts when it was sent, so only the switch's own
silence counts (tools-free check: 8-16 busy Python threads beside the probe, 80 idle
switches that answer at once; before, 32 and 51 declared hung in two of three runs, after,
none in four). A probe that stalls still reads what arrived before it judges, so it delays
detection; it no longer invents hangs.

Queued is not hung either. /proc's run delay grows only when a wait for a CPU ends, so a
switch kept runnable but off the CPU for the whole bound (behind a reroute's real-time
threads) showed no growth and was fenced while "running". A switch with a thread runnable
now (state R, `runnable_now`) is starved too, and gets another bound within STARVED_LIMIT.

Pings: the software switch's `ping` daemon command on its control socket (a second
connection: the controller's may be busy with a long command); BMv2's Thrift server, one
`bm_get_config_md5` call hand-encoded in Thrift's binary protocol (any answer proves the
server alive; no Thrift library in the prober's loop).
"""

from __future__ import annotations

import glob
import socket
import struct
import threading
import time
from typing import Callable

from agglab.ground.fdwait import readable

HANG_BOUND = 0.5          # seconds without an answer to a ping: hung
BMV2_HANG_BOUND = 2.5     # BMv2's (ThriftPing.bound): see "BMv2's bound" above
PING_INTERVAL = 0.1       # seconds between an answer and the next ping
STARVED_SHARE = 0.25      # runnable over this share of the bound: starved or busy, not hung
STARVED_LIMIT = 10.0      # seconds a starved switch may go unanswered before it is hung anyway


def runnable_seconds(pid: int | None) -> float | None:
    """Seconds the threads of process `pid` have been runnable, on a CPU or waiting for one,
    summed (None: not readable, e.g. the process is gone or on another machine). Every thread
    counts: BMv2 forwards and answers Thrift in threads of its own, so its main thread, which
    /proc/PID/schedstat alone describes, sleeps while the switch works or starves."""
    if pid is None:
        return None

    total, seen = 0, False
    for path in glob.glob(f"/proc/{pid}/task/*/schedstat"):
        try:
            with open(path) as f:
                fields = f.read().split()
            total += int(fields[0]) + int(fields[1])
            seen = True
        except (OSError, IndexError, ValueError):
            continue                              # a thread that ended meanwhile
    return total / 1e9 if seen else None


def runnable_now(pid: int | None) -> bool:
    """Whether a thread of process `pid` is runnable now (state R: on a CPU or queued for one).
    Why beside runnable_seconds: that sum grows only when a wait for a CPU ends, so a switch
    queued the whole time since its ping (behind real-time threads) shows none of its wait."""
    if pid is None:
        return False
    for path in glob.glob(f"/proc/{pid}/task/*/stat"):
        try:
            with open(path) as f:
                if f.read().rpartition(")")[2].split()[0] == "R":
                    return True
        except (OSError, IndexError):
            continue                              # a thread that ended meanwhile
    return False


STATES = {"R": "running", "S": "sleeping", "D": "waiting on I/O", "T": "stopped", "t": "stopped",
          "Z": "exited"}


def process_state(pid: int | None) -> str | None:
    """What process `pid` was doing, in words (/proc/PID/stat's state; None: gone or not
    local). Recorded when the probe declares a switch hung: a scripted hang (SIGSTOP) is
    "stopped"; a switch declared hung while "running" or "sleeping" was live or wedged, and
    a run record or test run that sees one can tell a false alarm from a real hang."""
    if pid is None:
        return None
    try:
        with open(f"/proc/{pid}/stat") as f:
            code = f.read().rpartition(")")[2].split()[0]       # after the command name, which may hold spaces
    except (OSError, IndexError):
        return None
    return STATES.get(code, code)


HangCallback = Callable[[str, float, float], None]    # (switch, last answer, time declared hung)


class SoftPing:
    """`ping` on a software switch's control socket; each reply is one JSON line."""

    def __init__(self, path: str, pid: int | None = None):
        self.pid = pid                      # the switch's process, when local (runnable_seconds)
        self.path = path
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(2)
        self.sock.connect(path)
        self.sock.setblocking(False)

    def send(self) -> None:
        self.sock.send(b"ping\n")

    def answered(self, data: bytes) -> int:
        return data.count(b"\n")


class ThriftPing:
    """One Thrift call to simple_switch (TMultiplexedProtocol "standard", binary protocol,
    buffered transport): any bytes back are an answer (one call outstanding at a time)."""

    bound = BMV2_HANG_BOUND

    def __init__(self, port: int, host: str = "127.0.0.1", pid: int | None = None):
        self.pid, self.host, self.port = pid, host, port
        self.sock = socket.create_connection((host, port), timeout=2)
        self.sock.setblocking(False)
        self.seq = 0

    def send(self) -> None:
        self.seq += 1
        name = b"standard:bm_get_config_md5"
        self.sock.send(struct.pack(">iI", -2147418111, len(name)) + name + struct.pack(">i", self.seq) + b"\x00")

    def answered(self, data: bytes) -> int:
        return 1 if data else 0


class SwitchProbe:
    """Pings every added switch (one thread); calls `on_hang(name, last_answer, t)` in a
    thread of its own when one has not answered for `bound` seconds (or its channel's own
    `bound`, e.g. ThriftPing's), and stops pinging it. `on_answered(name, yes)`, if given, is
    told (under the probe's lock: it must not wait) when a switch first answers on its channel
    and when an answered channel is dropped (emulation/probe_process.py reports both)."""

    def __init__(self, on_hang: HangCallback, bound: float = HANG_BOUND, interval: float = PING_INTERVAL,
                 on_answered: Callable[[str, bool], None] | None = None):
        self.on_hang, self.bound, self.interval, self.on_answered = on_hang, bound, interval, on_answered
        self._lock = threading.Lock()
        self._chans: dict[str, object] = {}
        self._sent: dict[str, float | None] = {}       # outstanding ping's send time (None: none)
        self._due: dict[str, float] = {}               # when the next ping goes
        self._seen: dict[str, float] = {}              # last answer
        self._answered: set[str] = set()               # answered at least once on this channel
        self._waited: dict[str, float | None] = {}     # runnable seconds when the ping went
        self.starved: dict[str, int] = {}              # times a late switch was found starved
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="switch-probe", daemon=True)

    def start(self) -> "SwitchProbe":
        self._thread.start()
        return self

    def add(self, name: str, channel) -> None:
        """Ping switch `name` over `channel` (SoftPing, ThriftPing) from now on."""
        now = time.monotonic()
        with self._lock:
            self._drop(name)
            self._chans[name], self._sent[name], self._due[name], self._seen[name] = channel, None, now, now

    def has_answered(self, name: str) -> bool:
        """Whether `name` answered a ping on this channel: before that it is never judged hung."""
        with self._lock:
            return name in self._answered

    def remove(self, name: str) -> None:
        with self._lock:
            self._drop(name)

    def _drop(self, name: str) -> None:
        chan = self._chans.pop(name, None)
        if chan is not None:
            chan.sock.close()
        for d in (self._sent, self._due, self._seen, self._waited):
            d.pop(name, None)
        if name in self._answered:
            self._answered.discard(name)
            if self.on_answered is not None:
                self.on_answered(name, False)

    def _run(self) -> None:
        while not self._stop.is_set():
            with self._lock:
                now = time.monotonic()
                for name, chan in list(self._chans.items()):
                    if self._sent[name] is None and self._due[name] <= now:
                        try:
                            chan.send()
                            # when it went, not when this sweep began: see "The probe's own stalls"
                            self._sent[name] = time.monotonic()
                            self._waited[name] = runnable_seconds(getattr(chan, "pid", None))
                        except OSError:          # the process is gone: the exit watcher's to report
                            self._drop(name)
                fds = {chan.sock.fileno(): name for name, chan in self._chans.items()}
                waits = [self._sent[n] + self._bound(n) - now for n in fds.values() if self._sent[n] is not None]
                waits += [self._due[n] - now for n in fds.values() if self._sent[n] is None]
            timeout = max(0.0, min(waits, default=self.interval))
            try:
                ready = readable(list(fds), timeout) if fds else []
            except (OSError, ValueError):            # a socket closed under us (remove): next turn
                ready = []
            if not fds:
                self._stop.wait(self.interval)
                continue
            hung = []
            with self._lock:
                self._read(ready)
                now = time.monotonic()
                late = [n for n, sent in self._sent.items()
                        if sent is not None and now - sent > self._bound(n) and n in self._answered]
                if late:                             # read what already arrived before judging
                    self._read(readable([self._chans[n].sock for n in late], 0))
                for name in late:
                    if name not in self._chans or self._sent[name] is None:
                        continue
                    if self._starved(name, now):
                        continue
                    hung.append((name, self._seen[name], now))
                    self._drop(name)
            for name, seen, t in hung:
                threading.Thread(target=self.on_hang, args=(name, seen, t), name=f"hung-{name}", daemon=True).start()

    def _bound(self, name: str) -> float:
        return getattr(self._chans[name], "bound", None) or self.bound

    def _starved(self, name: str, now: float) -> bool:
        """Whether late switch `name` ran, waited for a CPU or waits for one now (module
        docstring: "Starved or busy", "Queued is not hung"): if so its
        ping's clock restarts, within STARVED_LIMIT of its last answer (under the lock)."""
        pid = getattr(self._chans[name], "pid", None)
        before = self._waited.get(name)
        waited = runnable_seconds(pid)
        if before is None or waited is None or now - self._seen[name] > STARVED_LIMIT:
            return False
        if waited - before <= STARVED_SHARE * (now - self._sent[name]) and not runnable_now(pid):
            return False
        self._sent[name], self._waited[name] = now, waited
        self.starved[name] = self.starved.get(name, 0) + 1
        return True

    def _read(self, ready) -> None:
        """Take the answers waiting on the sockets (or fds) in `ready` (under the lock)."""
        by_fd = {chan.sock.fileno(): name for name, chan in self._chans.items()}
        for r in ready:
            name = by_fd.get(r if isinstance(r, int) else r.fileno())
            if name is None:
                continue
            chan = self._chans[name]
            try:
                data = chan.sock.recv(1 << 16)
            except BlockingIOError:
                continue
            except OSError:
                data = b""
            if not data:                         # closed: the process is gone (the exit watcher's)
                self._drop(name)
                continue
            if chan.answered(data):
                if name not in self._answered and self.on_answered is not None:
                    self.on_answered(name, True)
                self._answered.add(name)
                now = time.monotonic()
                self._sent[name], self._seen[name], self._due[name] = None, now, now + self.interval

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(2)
        with self._lock:
            for name in list(self._chans):
                self._drop(name)


def answers_within(chan, seconds: float) -> bool:
    """Whether switch `chan` (a fresh SoftPing or ThriftPing) answers one ping within `seconds`;
    the channel is closed after. The second opinion before a switch the probe declared hung,
    but that is not stopped, is fenced (emulation/switch_failures.py: "Late is not hung")."""
    deadline = time.monotonic() + seconds
    try:
        chan.send()
        while (left := deadline - time.monotonic()) > 0:
            if not readable([chan.sock.fileno()], left):
                continue
            try:
                data = chan.sock.recv(1 << 16)
            except BlockingIOError:
                continue
            if not data:                        # closed: the process is gone
                return False
            if chan.answered(data):
                return True
        return False
    except OSError:
        return False
    finally:
        chan.sock.close()


def ping_channel(backend: str, node) -> object:
    """The ping channel of a switch node (emulation/switch_nodes.py) of `backend`."""
    proc = getattr(node, "proc", None)
    pid = proc.pid if proc is not None and not getattr(node, "isRemote", False) else None
    if backend == "soft":
        return SoftPing(str(node.control_path), pid)
    return ThriftPing(node.thrift_port, pid=pid)


