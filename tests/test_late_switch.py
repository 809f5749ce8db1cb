"""Late is not hung (emulation/switch_failures.py): a switch the liveness probe declares hung
while its process is not stopped gets one ping more before it is fenced. A live switch that
answers it is kept, and pinged again; one that stays silent is fenced at the limit; a stopped
one is fenced at once, as before.

The switch is a small server on a Unix socket that answers the software switch's `ping` as its
daemon does; SIGUSR1 makes every answer wait on a lock a thread holds, asleep, until SIGUSR2 (as
a BMv2 switch whose Thrift thread waits on a busy lock), SIGSTOP stops it."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
from pathlib import Path

import networkx as nx

from agglab.emulation import switch_failures
from agglab.emulation.switch_failures import HANG_AUDIT, SwitchFailures
from agglab.testkit.waits import wait_until

SWITCH = """
import signal, socket, sys, threading
gate, release = threading.Lock(), threading.Event()
s = socket.socket(socket.AF_UNIX)
s.bind(sys.argv[1])
s.listen(8)

def hold():
    with gate:
        release.wait()

signal.signal(signal.SIGUSR1, lambda *_: threading.Thread(target=hold, daemon=True).start())
signal.signal(signal.SIGUSR2, lambda *_: release.set())
print("ready", flush=True)

def serve(c):
    while data := c.recv(4096):
        with gate:
            c.send(b'{"ok": true, "output": "pong"}\\n' * data.count(b"\\n"))

while True:
    c, _ = s.accept()
    threading.Thread(target=serve, args=(c,), daemon=True).start()
"""


class _Node:
    def __init__(self, proc: subprocess.Popen, control_path: Path):
        self.proc, self.control_path = proc, control_path

    def intfList(self):
        return []


class _Net:
    def __init__(self, nodes: dict):
        self.nodes = nodes

    def get(self, name: str) -> _Node:
        return self.nodes[name]


class _Network(SwitchFailures):
    """What SwitchFailures uses of EmulatedNetwork, around one switch process."""

    def __init__(self, node: _Node):
        self.graph = nx.Graph()
        self.graph.add_node("s1", kind="switch")
        self.backend, self.net, self.clients = "soft", _Net({"s1": node}), {}
        self.watcher = self.probe = None
        self.hung, self.hang_log, self.late, self.dead = {}, [], [], {}
        self.incarnation, self._downed, self._handled = {}, {}, {}

    def stop(self) -> None:
        for part in (self.probe, self.watcher):
            if part is not None:
                part.stop()


def _run(tmp_path: Path, sig: int, monkeypatch):
    monkeypatch.delenv(HANG_AUDIT, raising=False)       # these hangs are made here, not found
    path = tmp_path / "s1.sock"
    proc = subprocess.Popen([sys.executable, "-c", SWITCH, str(path)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline() == "ready\n"
    net = _Network(_Node(proc, path))
    exits, hangs = [], []
    net.watch_switches(lambda name, code, t: exits.append(name), lambda name, t: hangs.append(name))
    wait_until(lambda: net.probe.has_answered("s1"), what="the switch to answer the probe")
    proc.send_signal(sig)
    return proc, net, exits, hangs


def test_a_switch_that_answers_late_is_kept_and_pinged_again(tmp_path, monkeypatch):
    proc, net, exits, hangs = _run(tmp_path, signal.SIGUSR1, monkeypatch)
    try:
        # the probe declared it hung (dropped it), and the second ping is waiting: now it answers
        wait_until(lambda: not net.probe.has_answered("s1"), 30, what="the probe to declare the silent switch hung")
        proc.send_signal(signal.SIGUSR2)
        wait_until(lambda: net.late, 30, what="the second ping to find the switch late")
        assert net.late[0]["switch"] == "s1" and net.late[0]["t_answer"] - net.late[0]["t_last_answer"] > 0.5
        assert net.hung == {} and hangs == [] and exits == [] and proc.poll() is None
        wait_until(lambda: net.probe.has_answered("s1"), what="the probe to ping it again")
    finally:
        net.stop()
        proc.kill()
        proc.wait()


def test_a_switch_silent_past_the_limit_is_fenced(tmp_path, monkeypatch):
    monkeypatch.setattr(switch_failures, "STARVED_LIMIT", 2.0)
    proc, net, exits, hangs = _run(tmp_path, signal.SIGUSR1, monkeypatch)   # silent for good
    try:
        wait_until(lambda: exits, 60, what="the silent switch to be fenced")
        assert hangs == ["s1"] and net.hung["s1"]["state"] == "sleeping" and net.late == []
        assert net.hung["s1"]["t_detect"] - net.hung["s1"]["t_last_answer"] >= 2.0  # declared after the second ping's wait
        assert proc.wait(10) == -signal.SIGKILL
    finally:
        net.stop()
        proc.kill()
        proc.wait()


def test_a_stopped_switch_is_fenced_without_a_second_ping(tmp_path, monkeypatch):
    asked = []
    monkeypatch.setattr(switch_failures, "answers_within", lambda chan, seconds: asked.append(seconds) or True)
    proc, net, exits, hangs = _run(tmp_path, signal.SIGSTOP, monkeypatch)
    try:
        wait_until(lambda: exits, 60, what="the stopped switch to be fenced")
        assert hangs == ["s1"] and net.hung["s1"]["state"] == "stopped" and asked == [] and net.late == []
    finally:
        net.stop()
        proc.kill()
        proc.wait()
