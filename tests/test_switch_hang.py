"""A hung switch is a failed switch: the liveness probe (emulation/switch_probe.py) declares a
switch that stops answering hung, and the network fences it and reroutes around it as if it
had been killed; a late SIGCONT changes nothing."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import threading

import pytest

from agglab.testkit.waits import wait_until
from agglab.emulation.switch_probe import SwitchProbe


class _PairPing:
    """A ping channel over a socketpair whose far end a test thread answers (or not)."""

    def __init__(self):
        self.sock, self.peer = socket.socketpair()
        self.sock.setblocking(False)
        self.answering = threading.Event()
        self.answering.set()
        self.pings = 0
        threading.Thread(target=self._serve, daemon=True).start()

    def send(self) -> None:
        self.sock.send(b"ping\n")

    def answered(self, data: bytes) -> int:
        return data.count(b"\n")

    def _serve(self) -> None:
        try:
            while data := self.peer.recv(4096):
                self.pings += data.count(b"\n")
                if self.answering.is_set():
                    self.peer.send(b'{"ok": true, "output": "pong"}\n' * data.count(b"\n"))
        except OSError:
            pass


def test_the_probe_declares_only_the_silent_switch_hung():
    hung = []
    seen = threading.Event()
    probe = SwitchProbe(lambda name, last, t: (hung.append((name, last, t)), seen.set()),
                        bound=0.3, interval=0.02).start()
    try:
        live, silent = _PairPing(), _PairPing()
        probe.add("s1", live)
        probe.add("s2", silent)
        wait_until(lambda: silent.pings >= 3, what="the switches to answer")   # both answer for a while
        silent.answering.clear()
        assert seen.wait(30), "the silent switch was never declared hung"
        assert [h[0] for h in hung] == ["s2"]
        name, last, t = hung[0]
        assert t - last >= 0.3                  # silent for at least the bound
        count = live.pings
        wait_until(lambda: live.pings > count + 3, what="s1's next pings")        # s1 is still pinged, still live
        assert [h[0] for h in hung] == ["s2"]
    finally:
        probe.stop()


def test_a_closed_channel_is_left_to_the_exit_watcher():
    hung = []
    probe = SwitchProbe(lambda *a: hung.append(a), bound=0.2, interval=0.02).start()
    try:
        chan = _PairPing()
        probe.add("s1", chan)
        wait_until(lambda: probe.has_answered("s1"), what="s1 to answer")   # judged from now on
        chan.peer.close()                       # the process died: its socket closed
        wait_until(lambda: not probe.has_answered("s1"), what="the probe to drop the closed channel")
        assert hung == []                       # dropped, never to be judged
    finally:
        probe.stop()


@pytest.mark.root
@pytest.mark.mininet
@pytest.mark.net_timeout(300)
def test_a_stopped_aggregating_switch_is_fenced_and_rerouted_around_exactly():
    """k=4 fat-tree, 8 workers, 2M int32: SIGSTOP of an aggregating switch of the active tree
    at half the blocks; the result is exact and lists the hung switch with its detect and
    install times; SIGCONT afterwards wakes nothing, the next allreduce is exact, and the
    switch restarts like a killed one."""
    from agglab.emulation.session import Session
    from agglab.ground.runspec import RunSpec

    spec = RunSpec(topology="fattree", k=4, workers=8, elements=2_000_000, seed=1, hang_switch=["tree@0.5"])
    with Session(spec) as session:
        r = session.allreduce()
        assert r["exact"] and r["ok"], (r.get("errors"), r.get("hangs"), session.events.lines()[-40:])
        rows = [f for f in r["failures"] if f.get("hung")]
        assert len(rows) == 1, r["failures"]
        row = rows[0]
        assert row["on_tree"] and row["detect_ms"] is not None and row["install_ms"] is not None, row
        assert [h["switch"] for h in r["hangs"]] == [row["switch"]] and r["hangs"][0]["install_ms"] is not None
        assert r["hangs"][0]["state"] == "stopped", r["hangs"]        # the SIGSTOP, read when declared
        assert "stopped answering" in r["switches_down"][row["switch"]]
        assert any("switch_hung" in e and row["switch"] in e for e in session.events.lines())
        proc = session.net.host(row["switch"]).proc
        assert proc.poll() is not None                   # fenced: the stopped process is gone
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGCONT)              # a late wake-up finds nothing
        again = session.allreduce(hang_switch=[], elements=200_000)
        assert again["exact"] and again["hangs"] == [], again.get("errors")
        session.restart_switch(row["switch"])
        back = session.allreduce(hang_switch=[], elements=200_000)
        assert back["exact"] and back["hangs"] == [], back.get("errors")


def test_a_bad_hang_switch_is_one_line_and_exit_2():
    import subprocess
    import sys
    from pathlib import Path

    repo = Path(__file__).resolve().parent.parent
    res = subprocess.run([sys.executable, "-m", "agglab", "allreduce", "--topology", "fattree", "--k", "4",
                          "--hang-switch", "zz9@0.5"], cwd=repo, capture_output=True, text=True, timeout=120,
                         env=dict(os.environ, PYTHONPATH=str(repo)))
    assert res.returncode == 2
    assert res.stderr.strip().count("\n") == 0 and "--hang-switch: there is no switch 'zz9'" in res.stderr, res.stderr


def test_a_channel_that_never_answered_is_never_declared_hung():
    """A witness that answered, then fell silent after the mute channel's ping went, is declared
    hung: by then the mute channel's ping had waited longer, so it would have been too."""
    hung = []
    probe = SwitchProbe(lambda name, *a: hung.append(name), bound=0.1, interval=0.02).start()
    try:
        mute = _PairPing()
        mute.answering.clear()                  # e.g. a ping the target does not understand
        probe.add("s1", mute)
        wait_until(lambda: mute.pings >= 1, what="the mute channel's first ping")
        _answer_then_fall_silent(probe, witness=_PairPing())
        wait_until(lambda: hung, what="the witness to be declared hung")
        wait_until(lambda: not any(t.name.startswith("hung-") for t in threading.enumerate()),
                   what="the probe's hang callbacks to return")
        assert hung == ["witness"]
    finally:
        probe.stop()


def test_the_thrift_ping_is_the_call_thrifts_own_client_sends():
    from thrift.protocol import TBinaryProtocol, TMultiplexedProtocol
    from thrift.Thrift import TMessageType
    from thrift.transport import TTransport

    from agglab.emulation.switch_probe import ThriftPing

    buf = TTransport.TMemoryBuffer()
    proto = TMultiplexedProtocol.TMultiplexedProtocol(TBinaryProtocol.TBinaryProtocol(buf), "standard")
    proto.writeMessageBegin("bm_get_config_md5", TMessageType.CALL, 1)
    proto.writeStructBegin("bm_get_config_md5_args")
    proto.writeFieldStop()
    proto.writeStructEnd()
    proto.writeMessageEnd()

    class Sent:
        def send(self, data):
            self.data = data

    ping = ThriftPing.__new__(ThriftPing)
    ping.sock, ping.seq = Sent(), 0
    ping.send()
    assert ping.sock.data == buf.getvalue()


@pytest.mark.root
@pytest.mark.mininet
@pytest.mark.net_timeout(300)
def test_a_hang_reroutes_every_job_through_the_cli(tmp_path):
    """`--jobs 2 --hang-switch tree@0.5` from the command line: both jobs exact, the JSON lists
    the hang with the jobs that rerouted around it, and nothing of the run is left."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    from tests.leftovers import leftovers, new_leftovers

    repo = Path(__file__).resolve().parent.parent
    before = leftovers()
    res = subprocess.run([sys.executable, "-m", "agglab", "allreduce", "--topology", "fattree", "--k", "4",
                          "--workers", "4", "--jobs", "2", "--hang-switch", "tree@0.5", "--elements", "1000000",
                          "--json"], cwd=repo, capture_output=True, text=True, timeout=280,
                         env=dict(os.environ, PYTHONPATH=str(repo), AGGLAB_RUN_ROOT=str(tmp_path / "runs")))
    assert res.returncode == 0, res.stderr[-2000:]
    r = json.loads(res.stdout)
    assert r["exact"] and all(j["exact"] for j in r["jobs"]), r.get("errors")
    assert len(r["hangs"]) == 1 and r["hangs"][0]["on_tree"] and r["hangs"][0]["install_ms"] is not None, r["hangs"]
    assert r["hangs"][0]["state"] == "stopped", r["hangs"]
    hung = [f for f in r["failures"] if f.get("hung")]
    assert [f["switch"] for f in hung] == [r["hangs"][0]["switch"]] and hung[0]["detect_ms"] is not None
    assert "Traceback" not in res.stderr
    assert not any(new_leftovers(before).values())


def test_a_control_channel_error_outside_a_handled_failure_is_one_line(monkeypatch, capsys):
    import agglab.cli as cli
    from agglab.controller.switch_client import SwitchCommandError

    def fails(_args):
        raise SwitchCommandError("a2: 'counter_read agg_stats 0': switch at /run/agglab/x/a2.sock: "
                                 "no reply to 'counter_read agg_stats 0' within 30.0s")

    monkeypatch.setattr(cli, "_clean", fails)
    assert cli.main(["clean"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("agglab clean: a switch stopped answering") and "a2" in err


@pytest.mark.root
@pytest.mark.mininet
@pytest.mark.net_timeout(300)
def test_a_hung_switch_restarted_the_moment_it_is_fenced_comes_back_with_its_ports_up():
    """The chaos schedule restarts a hung switch as soon as the network lists it dead, which is
    before the watcher has handled its death (the jobs' reroute, then its ports taken down).
    The restart must wait for that: it used to bring the ports up first, and the watcher then
    took them down under the new process (chaos: a job whose worker's only path crossed that
    port timed out on every later run). Here the jobs take 0.5 s to handle a failure, as under
    load, so the old race is certain."""
    import time
    from pathlib import Path

    from agglab.emulation.session import Session
    from agglab.ground.runspec import RunSpec

    spec = RunSpec(topology="leafspine", workers=4, elements=50_000, seed=1)
    with Session(spec) as session:
        sw = next(s for s in session.job.trees().trees[0].parent if s.startswith("s"))   # a spine on the tree
        handle = session.group.switch_changed

        def slowly(*args, **kwargs):
            if args[1] is False:
                time.sleep(0.5)          # the slowness under test: a job handling a failure under load
            return handle(*args, **kwargs)

        assert session.allreduce()["exact"]
        wait_until(lambda: session.net.probe.has_answered(sw),   # the probe judges a switch once it answered
                   what="the probe to hear from the switch")
        session.group.switch_changed = slowly
        session.net.hang_switch(sw)
        wait_until(lambda: sw in session.net.dead, what="the hung switch to be fenced", every=0.005)
        handled = session.net._handled[sw]   # set when the watcher's thread is done (reroute, ports down)
        session.restart_switch(sw)
        wait_until(handled.is_set, what="the watcher to handle the fenced switch's death")
        ports = [i.name for i in session.net.host(sw).intfList() if i.name != "lo"]
        down = [p for p in ports if not int(Path(f"/sys/class/net/{p}/flags").read_text(), 16) & 1]
        assert ports and down == [], f"{sw}'s ports down after its restart: {down}"
        r = session.allreduce()
        assert r["exact"], r.get("errors")


def test_runnable_seconds_grow_for_a_process_kept_off_the_cpu_and_not_for_a_stopped_one():
    """What the probe tells a starved switch from a hung one by (/proc/PID/schedstat)."""
    import subprocess
    import sys
    import time

    from agglab.emulation.switch_probe import runnable_seconds

    spin = [sys.executable, "-c", "while True: pass"]
    busy = [subprocess.Popen(spin) for _ in range(3)]
    stopped = subprocess.Popen(["sleep", "60"])
    try:
        for p in busy:
            os.sched_setaffinity(p.pid, {0})         # three runnable processes, one CPU
        os.kill(stopped.pid, signal.SIGSTOP)
        wait_until(lambda: open(f"/proc/{stopped.pid}/stat").read().split(") ")[1][0] == "T",
                   what="the stop to take effect")   # the stop itself runs in the process
        before = {p.pid: (runnable_seconds(p.pid), _on_cpu_seconds(p.pid)) for p in busy + [stopped]}

        def grew(pid):
            return runnable_seconds(pid) - before[pid][0], _on_cpu_seconds(pid) - before[pid][1]

        wait_until(lambda: all(grew(p.pid)[0] > 0.5 for p in busy), what="the spinners' runnable time")
        for p in busy:                               # each ran a third of the time and waited the rest
            runnable, on_cpu = grew(p.pid)
            assert runnable > 1.5 * on_cpu, (runnable, on_cpu)
        assert grew(stopped.pid) == (0.0, 0.0)
        assert runnable_seconds(None) is None and runnable_seconds(2 ** 22 + 12345) is None
    finally:
        for p in busy + [stopped]:
            p.kill()
            p.wait()


def test_runnable_seconds_count_every_thread_of_a_process():
    """BMv2 forwards and answers Thrift in threads of its own while its main thread sleeps: a
    process whose only busy thread is a second one, kept off its CPU by two spinners, waited."""
    import subprocess
    import sys
    import time

    from agglab.emulation.switch_probe import runnable_seconds

    threaded = subprocess.Popen([sys.executable, "-c", "import threading, time\n"
                                 "threading.Thread(target=lambda: [None for _ in iter(int, 1)], daemon=True).start()\n"
                                 "time.sleep(60)"])
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
    try:
        wait_until(lambda: len(os.listdir(f"/proc/{threaded.pid}/task")) >= 2,
                   what="its busy thread to start")
        for p in [threaded, *spinners]:
            for tid in os.listdir(f"/proc/{p.pid}/task"):
                os.sched_setaffinity(int(tid), {0})
        before, on_cpu = runnable_seconds(threaded.pid), _on_cpu_seconds(threaded.pid)
        main = _on_cpu_seconds(threaded.pid, main_only=True)
        wait_until(lambda: runnable_seconds(threaded.pid) - before > 0.5, what="its runnable time to grow")
        runnable, ran = runnable_seconds(threaded.pid) - before, _on_cpu_seconds(threaded.pid) - on_cpu
        assert runnable > 1.5 * ran, (runnable, ran)       # its busy thread waited two thirds of the time
        assert _on_cpu_seconds(threaded.pid, main_only=True) - main < 0.1 * runnable   # not the main thread's
    finally:
        for p in [threaded, *spinners]:
            p.kill()
            p.wait()


def test_runnable_seconds_grow_for_a_process_on_a_cpu_of_its_own():
    """A busy switch that is not starved (it runs) is not stopped either: a spinner alone on a
    CPU waits for none, and its runnable time still grows (the run-queue wait alone did not)."""
    import subprocess
    import sys
    import time

    from agglab.emulation.switch_probe import runnable_seconds

    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        os.sched_setaffinity(spinner.pid, {1 % os.cpu_count()})
        before = runnable_seconds(spinner.pid)
        wait_until(lambda: runnable_seconds(spinner.pid) - before > 0.1, what="its runnable time to grow")
    finally:
        spinner.kill()
        spinner.wait()


def _on_cpu_seconds(pid: int, main_only: bool = False) -> float:
    """Seconds process `pid`'s threads (or its main thread) ran on a CPU (schedstat's first field)."""
    tasks = [str(pid)] if main_only else os.listdir(f"/proc/{pid}/task")
    return sum(int(open(f"/proc/{pid}/task/{t}/schedstat").read().split()[0]) for t in tasks) / 1e9


def _answer_then_fall_silent(probe, tick=lambda: None, **channels) -> None:
    """Add the channels to the probe, wait until each has answered 3 pings, then silence them all
    (`tick` moves a fake clock on while waiting, so the next pings fall due)."""
    for name, chan in channels.items():
        probe.add(name, chan)
    wait_until(lambda: (tick(), all(chan.pings >= 3 for chan in channels.values()))[1],
               what="every channel to answer 3 pings")
    for chan in channels.values():
        chan.answering.clear()


class _FakeClock:
    """The probe's time.monotonic: moves only when the test says; counts its reads, so the test
    knows the probe has looked at the new time."""

    def __init__(self):
        self.now, self.reads = 1000.0, 0

    def monotonic(self) -> float:
        self.reads += 1
        return self.now


def test_a_late_switch_that_waited_for_a_cpu_gets_more_time_and_a_stopped_one_does_not(monkeypatch):
    """On a fake clock moved STEP at a time, each step looked at by the probe: the stopped
    switch is judged within a step of its bound, the starved one only at the starvation limit."""
    from types import SimpleNamespace

    from agglab.emulation import switch_probe

    clock, bound, interval, step = _FakeClock(), 0.3, 0.02, 0.1
    monkeypatch.setattr(switch_probe, "time", SimpleNamespace(monotonic=clock.monotonic))
    start = clock.now
    waits = {101: lambda: 0.5 * (clock.now - start),         # runnable, half the time off the CPU
             202: lambda: 0.0}                               # stopped: never runnable
    monkeypatch.setattr(switch_probe, "runnable_seconds", lambda pid: waits[pid]() if pid in waits else None)
    monkeypatch.setattr(switch_probe, "STARVED_LIMIT", 2.0)
    monkeypatch.setattr(switch_probe, "runnable_now", lambda pid: False)   # 101, 202: not real processes
    hung: dict = {}
    probe = SwitchProbe(lambda name, last, t: hung.setdefault(name, t - last), bound=bound,
                        interval=interval).start()

    def look(seconds: float) -> None:
        """Move the clock on, and wait until the probe has made a pass at the new time."""
        clock.now += seconds
        reads = clock.reads
        wait_until(lambda: clock.reads >= reads + 3, what="the probe to look at the clock")

    def a_step() -> bool:
        look(step)
        return len(hung) == 2

    try:
        starved, stopped = _PairPing(), _PairPing()
        starved.pid, stopped.pid = 101, 202
        _answer_then_fall_silent(probe, tick=lambda: look(interval), starved=starved, stopped=stopped)
        wait_until(a_step, what="both switches to be judged")
        # the last answer, its next ping a step later at most, the bound, a step to see it pass
        assert bound < hung["stopped"] <= interval + step + bound + step + 1e-9, hung   # judged at the bound
        assert 2.0 < hung["starved"] <= 2.0 + bound + step + 1e-9, hung   # only at the starvation limit
        assert probe.starved["starved"] >= 3 and "stopped" not in probe.starved
    finally:
        probe.stop()


def test_a_channel_with_a_bound_of_its_own_is_judged_by_it():
    """BMv2's pings carry a longer bound than the probe's (emulation/switch_probe.py, BMv2's
    bound): two switches fall silent together, and the one on the probe's bound is hung first
    while the other is still waited for."""
    from agglab.emulation.switch_probe import BMV2_HANG_BOUND, HANG_BOUND, ThriftPing

    assert ThriftPing.bound == BMV2_HANG_BOUND > HANG_BOUND
    hung: list[str] = []
    first = threading.Event()
    probe = SwitchProbe(lambda name, last, t: (hung.append(name), first.set()), bound=0.2, interval=0.02).start()
    try:
        short, patient = _PairPing(), _PairPing()
        patient.bound = 30.0
        _answer_then_fall_silent(probe, short=short, patient=patient)
        assert first.wait(60)
        assert hung == ["short"]
        assert probe.has_answered("patient")        # still pinged, not dropped
    finally:
        probe.stop()
