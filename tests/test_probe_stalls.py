"""The liveness probe never blames a switch for its own stall, nor a switch queued for a CPU.

Why (emulation/switch_probe.py, "The probe's own stalls" and "Queued is not hung"): at 128
hosts a reroute's Python held the GIL while the probe swept 80 switches; pings that left at
the end of the slow sweep were timed from its start, and 59 live switches were fenced at one
instant. Here the probe runs on a fake clock that moves only when the test (or a channel
standing for the stalled sweep) moves it, so nothing depends on the machine's speed.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
from types import SimpleNamespace

from agglab.emulation import switch_probe
from agglab.emulation.switch_probe import SwitchProbe, process_state, runnable_now
from agglab.testkit.waits import wait_until
from tests.test_switch_hang import _FakeClock as _Clock   # one fake monotonic clock for the probe's tests


class _Switch:
    """A ping channel over a socketpair; a thread answers its first `answers` pings, then none.
    `stall_at`: on that send the fake clock jumps `stall` seconds (the probe's thread lost the
    CPU or the GIL in the middle of its sweep). No race with the test: a ping goes only when
    the test moves the clock, and which pings are answered is fixed up front."""

    def __init__(self, clock: _Clock, pid: int | None = None, answers: int = 3,
                 stall_at: int | None = None, stall: float = 2.0):
        self.clock, self.pid, self.answers = clock, pid, answers
        self.stall_at, self.stall, self.sends = stall_at, stall, 0
        self.sock, self.peer = socket.socketpair()
        self.sock.setblocking(False)
        self.pings = 0
        threading.Thread(target=self._serve, daemon=True).start()

    def send(self) -> None:
        self.sock.send(b"ping\n")
        self.sends += 1
        if self.sends == self.stall_at:
            self.clock.now += self.stall

    def answered(self, data: bytes) -> int:
        return data.count(b"\n")

    def _serve(self) -> None:
        try:
            while data := self.peer.recv(4096):
                for _ in range(data.count(b"\n")):
                    self.pings += 1
                    if self.pings <= self.answers:
                        self.peer.send(b'{"ok": true, "output": "pong"}\n')
        except OSError:
            pass


def _probe_on(clock: _Clock, monkeypatch, hung: dict, **switches):
    """A started probe (bound 0.3 s, interval 0.02 s) on `clock` pinging `switches`; and
    `look(seconds)`, which moves the clock on and waits until the probe has read it a few
    times (made a pass at the new time)."""
    monkeypatch.setattr(switch_probe, "time", SimpleNamespace(monotonic=clock.monotonic))
    probe = SwitchProbe(lambda name, last, t: hung.setdefault(name, (last, t)), bound=0.3, interval=0.02).start()

    def look(seconds: float) -> None:
        clock.now += seconds
        reads = clock.reads
        wait_until(lambda: clock.reads >= reads + 6, what="the probe to look at the clock")

    for name, chan in switches.items():
        probe.add(name, chan)
    return probe, look


def test_a_sweep_stalled_past_the_bound_declares_no_switch_and_a_silent_one_is_judged_after(monkeypatch):
    """Both switches answer 3 pings, then fall silent. The probe's thread stalls 2 s (fake)
    inside the sweep that sends the 4th pings, right after the first switch's: neither
    switch has had a moment to answer, so neither is hung (the old probe timed the pings from
    the sweep's start and fenced the first at once). Once the bound has passed on the probe's
    clock since each ping went, both are declared."""
    monkeypatch.setattr(switch_probe, "runnable_seconds", lambda pid: None)    # no starvation test
    clock, hung = _Clock(), {}
    first, second = _Switch(clock, stall_at=4), _Switch(clock)
    probe, look = _probe_on(clock, monkeypatch, hung, first=first, second=second)
    try:
        wait_until(lambda: (look(0.02), first.pings >= 4 and second.pings >= 4)[1],
                   what="the 4th pings (the first one's sweep stalled)")
        look(0.0)                                # more passes at the time the pings went
        look(0.0)
        assert not hung and probe.has_answered("first") and probe.has_answered("second"), hung
        wait_until(lambda: (look(0.05), len(hung) == 2)[1], what="both silent switches to be declared")
        last, t = hung["first"]
        assert t - last > 2.0 + 0.3, t - last    # the stall, then the whole bound
    finally:
        probe.stop()


def test_a_switch_queued_for_a_cpu_is_not_hung_until_the_starvation_limit(monkeypatch):
    """A switch runnable all along but never scheduled shows no growth of its run time (/proc
    adds a wait when it ends); being runnable now (state R) gives it more time, up to
    STARVED_LIMIT, while a switch that is not runnable is judged at the bound."""
    monkeypatch.setattr(switch_probe, "runnable_seconds", lambda pid: 0.0)     # no growth, ever
    monkeypatch.setattr(switch_probe, "runnable_now", lambda pid: pid == 303)
    monkeypatch.setattr(switch_probe, "STARVED_LIMIT", 2.0)
    clock, hung = _Clock(), {}
    probe, look = _probe_on(clock, monkeypatch, hung, queued=_Switch(clock, pid=303),
                            asleep=_Switch(clock, pid=404))
    try:
        wait_until(lambda: (look(0.05), "asleep" in hung)[1], what="the sleeping switch to be declared")
        assert "queued" not in hung and probe.starved.get("queued", 0) >= 1
        wait_until(lambda: (look(0.05), "queued" in hung)[1], what="the queued switch to reach the limit")
        last, t = hung["queued"]
        assert t - last > 2.0, t - last
        assert "asleep" not in probe.starved
    finally:
        probe.stop()


def test_runnable_now_tells_a_running_process_from_a_sleeping_and_a_stopped_one():
    """This process is running (the thread asking is on a CPU); a child blocked on a read
    is not; nor is one stopped with SIGSTOP; nor a pid that is gone."""
    assert runnable_now(os.getpid())
    asleep = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    stopped = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    try:
        wait_until(lambda: process_state(asleep.pid) == "sleeping" and process_state(stopped.pid) == "sleeping",
                   what="both children to block on their input")
        os.kill(stopped.pid, signal.SIGSTOP)
        wait_until(lambda: process_state(stopped.pid) == "stopped", what="the child to stop")
        assert not runnable_now(asleep.pid)
        assert not runnable_now(stopped.pid)
        assert not runnable_now(None)
    finally:
        for p in (asleep, stopped):
            p.kill()
            p.wait()
    assert not runnable_now(asleep.pid)
