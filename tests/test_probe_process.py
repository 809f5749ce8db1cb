"""The liveness probe in a process of its own (emulation/probe_process.py): it declares a
stopped switch hung while the session's process does not run at all, reports it over its pipe,
and leaves no process behind, whether stopped or orphaned.

The switches are small servers on Unix sockets that answer the software switch's `ping` as its
daemon does; a hang is a SIGSTOP, as `--hang-switch` makes one."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from agglab.emulation.probe_process import ProbeProcess
from agglab.emulation.switch_probe import SoftPing, process_state
from agglab.testkit.waits import wait_until

REPO = Path(__file__).resolve().parent.parent

SWITCH = """
import socket, sys, threading
s = socket.socket(socket.AF_UNIX)
s.bind(sys.argv[1])
s.listen(8)
print("ready", flush=True)

def serve(c):
    while data := c.recv(4096):
        c.send(b'{"ok": true, "output": "pong"}\\n' * data.count(b"\\n"))

while True:
    c, _ = s.accept()
    threading.Thread(target=serve, args=(c,), daemon=True).start()
"""

# A session: starts the probe process on one switch, says when the switch answered, and says
# each hang it is told of; it ends (stopping the probe) when its stdin closes.
SESSION = """
import sys, threading
from agglab.emulation.probe_process import ProbeProcess
from agglab.emulation.switch_probe import SoftPing
from agglab.testkit.waits import wait_until

probe = ProbeProcess(lambda name, last, t: print("hung", name, flush=True), bound=0.2, interval=0.02).start()
probe.add("x", SoftPing(sys.argv[1], int(sys.argv[2])))
wait_until(lambda: probe.has_answered("x"), what="x to answer")
print("ready", probe.proc.pid, flush=True)
sys.stdin.read()
probe.stop()
print("stopped", probe.proc.returncode, flush=True)
"""


def _switch(path: Path) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", SWITCH, str(path)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready"
    return proc


def _end(*procs: subprocess.Popen) -> None:
    for p in procs:
        if p.poll() is None:
            os.kill(p.pid, signal.SIGCONT)
            p.kill()
        p.wait()


def _sockets(pid: int) -> set[str]:
    out = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:"):
            out.add(target)
    return out


def test_only_the_stopped_switch_is_declared_and_stop_leaves_no_process(tmp_path):
    live, silent = _switch(tmp_path / "live.sock"), _switch(tmp_path / "silent.sock")
    hung = []
    probe = ProbeProcess(lambda name, last, t: hung.append((name, last, t)), bound=0.2, interval=0.02).start()
    try:
        probe.add("live", SoftPing(str(tmp_path / "live.sock"), live.pid))
        probe.add("silent", SoftPing(str(tmp_path / "silent.sock"), silent.pid))
        wait_until(lambda: probe.has_answered("live") and probe.has_answered("silent"), what="both to answer")
        os.kill(silent.pid, signal.SIGSTOP)
        wait_until(lambda: hung, what="the stopped switch to be declared hung")
        assert [h[0] for h in hung] == ["silent"]
        name, last, t = hung[0]
        assert t - last >= 0.2                           # silent for at least the bound (the child's clock)
        assert not probe.has_answered("silent") and probe.has_answered("live")
        probe.remove("live")
        assert not probe.has_answered("live")           # forgotten at once, not when the child says so
    finally:
        probe.stop()
        _end(live, silent)
    assert probe.proc.returncode == 0                    # it ended on its stdin's close, not a kill
    assert process_state(probe.proc.pid) is None         # reaped: nothing left
    assert [h[0] for h in hung] == ["silent"]


def _session(tmp_path: Path):
    """A switch and a session process whose probe pings it: (switch, session, the probe's pid)."""
    switch = _switch(tmp_path / "x.sock")
    session = subprocess.Popen([sys.executable, "-c", SESSION, str(tmp_path / "x.sock"), str(switch.pid)],
                               cwd=REPO, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                               env=dict(os.environ, PYTHONPATH=str(REPO)))
    word, pid = session.stdout.readline().split()
    assert word == "ready"
    return switch, session, pid


def test_a_hang_is_declared_while_the_session_does_not_run_and_told_when_it_does(tmp_path):
    """The point of the process: with the session's process stopped outright (the extreme of a
    session whose Python holds the GIL), the probe still drops the hung switch's channel; the
    session hears of it once it runs again. A probe thread inside the session would declare
    nothing while the session is stopped."""
    switch, session, pid = _session(tmp_path)
    try:
        child = int(pid)
        before = _sockets(child)
        os.kill(session.pid, signal.SIGSTOP)
        wait_until(lambda: process_state(session.pid) == "stopped", what="the session to stop")
        os.kill(switch.pid, signal.SIGSTOP)
        wait_until(lambda: len(_sockets(child)) == len(before) - 1, what="the probe to drop the hung switch")
        assert process_state(session.pid) == "stopped"  # declared while the session could not run
        os.kill(session.pid, signal.SIGCONT)
        assert session.stdout.readline().split() == ["hung", "x"]
        session.stdin.close()
        assert session.stdout.readline().split() == ["stopped", "0"]
        assert session.wait(60) == 0
        assert process_state(child) is None              # the session reaped its probe
    finally:
        _end(session, switch)


def test_the_probe_process_ends_with_a_session_killed_outright(tmp_path):
    switch, session, pid = _session(tmp_path)
    try:
        session.kill()                                   # no clean-up runs: its pipes close with it
        session.wait()
        wait_until(lambda: process_state(int(pid)) in (None, "exited"), what="the orphaned probe to end")
    finally:
        _end(session, switch)


def test_a_channel_it_cannot_describe_is_refused_in_one_line():
    probe = ProbeProcess(lambda *a: None)
    chan = threading.Event()                              # not a ping channel
    with pytest.raises(TypeError, match="no ping channel a probe process can open: Event"):
        probe.add("x", chan)
