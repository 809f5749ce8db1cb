"""A network's switch failures: a switch that dies or hangs is seen, fenced and restartable.

Why a module of its own: a switch's death is a lifecycle of its own beside the network's
build and teardown (emulation/network.py): its process is watched (a pidfd each,
emulation/switch_watch.py) and pinged (emulation/switch_probe.py); a dead switch's ports go
down as a dead box's would; a hung one is fenced with SIGKILL; `kill_switch`, `hang_switch`
and `restart_switch` make these failures on purpose (the lab, --fail-switch, --hang-switch,
chaos), and `check_switches` says what died during a run.

SwitchFailures is a mixin of EmulatedNetwork (and so of the cluster's network, which
overrides what differs across servers). It uses the network's `graph`, `backend`, `net`,
`clients` and `_connect`, and the failure state EmulatedNetwork.__init__ sets up: `watcher`,
`probe`, `hung`, `hang_log`, `late`, `dead`, `incarnation`, `_downed`, `_handled`.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import threading
import time
from pathlib import Path

from agglab.controller.topology import switches
from agglab.emulation.probe_process import ProbeProcess
from agglab.emulation.switch_probe import STARVED_LIMIT, answers_within, ping_channel, process_state
from agglab.emulation.switch_watch import SwitchWatcher


CONFIRMED_STATES = ("stopped", "exited", None)   # fenced at once; any other state is asked again first
SECOND_OPINION_MIN = 1.0       # seconds the second opinion waits at least

HANG_AUDIT = "AGGLAB_HANG_AUDIT"     # a file: every hang any run declares is appended to it (one JSON line)


def audit_hang(switch: str, state: str | None, run: Path | None) -> None:
    """Append a declared hang to $AGGLAB_HANG_AUDIT, when set. Why: a test run (CI, or the test
    suite beside busy loops) must be able to say that no live switch was ever declared hung,
    across every run it made, including runs whose tests expected a hang (those are "stopped")."""
    path = os.environ.get(HANG_AUDIT)
    if path:
        with open(path, "a") as f:
            f.write(json.dumps({"switch": switch, "state": state, "run": str(run) if run else None,
                                "time": time.time()}) + "\n")


def read_hang_audit(path: Path) -> list[dict]:
    """The hangs audit_hang appended to `path`, in order ([] when there is none)."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


class SwitchFailures:
    """The switch-failure methods of EmulatedNetwork (see the module's docstring)."""

    LIVENESS_PROBE = True      # watch_switches pings the switches (hang detection)

    def watch_switches(self, on_exit, on_hang=None) -> None:
        """Call `on_exit(switch, code, t)` (its own thread) the moment a switch process exits
        (pidfd: emulation/switch_watch.py), then take the dead switch's ports down, as a dead
        box's ports lose their link: netlink then reports its links down (the controller has
        already marked them). Stopped by stop(). BMv2: the ports are left alone, because an
        administratively down port stalls a neighbour simple_switch's receive thread (see
        EmulatedNetwork.set_link); the neighbours' packets into the dead switch are lost either way.

        A switch that stops answering the liveness probe (emulation/switch_probe.py) is hung:
        `on_hang(switch, t)` is called, then it is fenced with SIGKILL, which a stopped or
        wedged process cannot block or outlive, so a late SIGCONT finds nothing to wake and
        no stale frame or register can come back. Its death then takes exactly the path of a
        killed switch (on_exit with t = when the hang was declared, ports down, restartable
        with restart_switch). Why kill rather than only take its ports down: a hung process
        still holds its control socket and would answer the controller's next command with
        state from before the reroute; a dead one is the case everything already handles."""

        def exited(name: str, code: int, t: float) -> None:
            # before `dead` says so: restart_switch waits on it until the ports are down, or a
            # restart right after a hung switch's fencing (nothing made this event for it
            # then) raced this thread, which took the new process's ports down after the
            # restart brought them up (chaos: a job's worker cut off for good)
            handled = self._handled.setdefault(name, threading.Event())
            hang = self.hung.get(name)
            self.dead[name] = (f"switch {name} stopped answering (no reply to a ping for "
                               f"{(hang['t_detect'] - hang['t_last_answer']) * 1e3:.0f} ms): fenced (killed)"
                               if hang else self.net.get(name).died() or f"switch {name} exited with code {code}")
            try:
                on_exit(name, code, hang["t_detect"] if hang else t)
            finally:
                if self.backend == "soft":
                    self._ports(name, up=False)
                handled.set()

        def hung(name: str, last_answer: float, t: float) -> None:
            proc = self.net.get(name).proc
            if self.probe is None or name in self.dead or proc is None or proc.poll() is not None:
                return                              # gone already (the exit watcher reports it) or torn down
            state = self._process_state(name)
            if state not in CONFIRMED_STATES:
                if self._answers_late(name, last_answer, t):
                    return                          # late, not hung: pinged again from now on
                if self.probe is None or name in self.dead or proc.poll() is not None:
                    return                          # torn down or gone while it was asked again
                t = time.monotonic()                # declared now: its silence lasted until here
            self.hung[name] = {"t_detect": t, "t_last_answer": last_answer, "state": state}
            self.hang_log.append({"switch": name, **self.hung[name]})
            run = getattr(self, "run", None)
            audit_hang(name, self.hung[name]["state"], run.path if run else None)
            if on_hang is not None:
                on_hang(name, t)
            self._signal_switch(name, signal.SIGKILL)

        self.watcher = SwitchWatcher(exited).start()
        # a process of its own: its sweep never waits for this process's GIL (probe_process.py)
        self.probe = ProbeProcess(hung).start() if self.LIVENESS_PROBE else None
        for s in switches(self.graph):
            self.watcher.add(s, self.net.get(s).proc)
            self._probe(s)

    def _probe(self, name: str) -> None:
        """Ping switch `name` from now on (after it answered its client: started or restarted)."""
        if self.probe is not None:
            try:
                self.probe.add(name, self._ping_channel(name))
            except OSError:                          # gone before it could be pinged: the watcher's case
                pass

    def _ping_channel(self, name: str):
        """A new ping channel to switch `name` (a cluster's crosses to its server)."""
        return ping_channel(self.backend, self.net.get(name))

    def _answers_late(self, name: str, last_answer: float, t: float) -> bool:
        """Late is not hung: the second opinion on a switch the probe declared hung while its
        process was not stopped.

        Why: the probe's bound (0.5 s; BMv2's 2.5 s) is what a live switch takes on a busy
        machine, and where its threads are not seen (a cluster's server) nothing tells a
        starved switch from a wedged one. Beside two busy loops a live BMv2 edge on a practice
        cluster's server, "sleeping", was declared hung and fenced, and its worker cut off
        (`tests/test_cluster_allreduce.py`'s tunnelled-link test, 2026-12-07). So one ping
        more, on a channel of its own, may take until STARVED_LIMIT after the last answer
        (at least SECOND_OPINION_MIN): an answer keeps the switch (recorded in `late`; the
        probe pings it again), silence fences it. A SIGSTOPped switch ("stopped") is fenced at
        once as before; a deadlocked one (asleep on a lock) is fenced at the limit."""
        try:
            chan = self._ping_channel(name)
        except OSError:
            return False
        wait = max(SECOND_OPINION_MIN, last_answer + STARVED_LIMIT - time.monotonic())
        if not answers_within(chan, wait):
            return False
        self.late.append({"switch": name, "t_detect": t, "t_last_answer": last_answer, "t_answer": time.monotonic()})
        self._probe(name)
        return True

    def kill_switch(self, name: str, wait: float | None = None) -> float:
        """`kill -9` switch `name`'s data-plane process (a switch failure); returns the
        monotonic time of the kill. The watcher (watch_switches) notices the exit; with
        `wait` (seconds), return only once it has been handled (the controller rerouted)."""
        proc = self._switch_proc(name)
        if proc.poll() is not None or name in self.dead or name in self._handled:
            raise ValueError(f"switch {name} is not running")
        done = self._handled[name] = threading.Event()
        t = time.monotonic()
        os.kill(proc.pid, signal.SIGKILL)
        if wait and self.watcher is not None and not done.wait(wait):
            raise RuntimeError(f"switch {name} was killed but its exit was not handled within {wait} s")
        return t

    def hang_switch(self, name: str) -> float:
        """SIGSTOP switch `name`'s process (a hung switch: alive, silent); returns the
        monotonic time. The liveness probe (watch_switches) declares it hung and fences it."""
        proc = self._switch_proc(name)
        if proc.poll() is not None or name in self.dead:
            raise ValueError(f"switch {name} is not running")
        t = time.monotonic()
        self._signal_switch(name, signal.SIGSTOP)
        return t

    def _process_state(self, name: str) -> str | None:
        """What switch `name`'s process was doing when declared hung (switch_probe.process_state)."""
        return process_state(self.net.get(name).proc.pid)

    def _signal_switch(self, name: str, sig: int) -> None:
        """Send `sig` to switch `name`'s data-plane process (here: the local child; a cluster
        sends it on the switch's server, emulation/cluster/network.py)."""
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.net.get(name).proc.pid, sig)

    def restart_switch(self, name: str) -> float:
        """Start a dead switch again on the same ports and control socket (or Thrift port),
        with empty tables and registers, bring back the ports that died with it and connect
        a new client (in `clients`, which the job shares). Returns the monotonic time it
        answered; the caller re-programs it (Session.restart_switch)."""
        proc = self._switch_proc(name)
        if proc.poll() is None:
            raise ValueError(f"switch {name} is running; kill it first")
        handled = self._handled.get(name)
        if handled is not None and self.watcher is not None:
            handled.wait(10)                     # its death is handled before it comes back
        if self.backend == "soft":
            self._ports(name, up=True)
        node = self.net.get(name)
        node.start([])
        old = self.clients.pop(name, None)
        if old is not None:
            old.close()
        self.clients[name] = self._connect(name)
        self.dead.pop(name, None)
        self.hung.pop(name, None)
        self._handled.pop(name, None)
        self.incarnation[name] = self.incarnation.get(name, 0) + 1
        if self.watcher is not None:
            self.watcher.add(name, node.proc)
            self._probe(name)
        return time.monotonic()

    def _switch_proc(self, name: str):
        if name not in self.graph or self.graph.nodes[name]["kind"] != "switch":
            raise ValueError(f"no switch {name!r} in this network (switches: {', '.join(switches(self.graph))})")
        return self.net.get(name).proc

    def _ports(self, name: str, up: bool) -> None:
        """Take a dead switch's (root-namespace) ports down, remembering which were up; or
        bring exactly those back."""
        if up:
            names = self._downed.pop(name, [])
        else:
            names = [i.name for i in self.net.get(name).intfList() if i.name != "lo"
                     and Path(f"/sys/class/net/{i.name}/flags").exists()
                     and int(Path(f"/sys/class/net/{i.name}/flags").read_text(), 16) & 1]
            self._downed[name] = names
        if names:
            subprocess.run(["ip", "-batch", "-"], input="".join(f"link set dev {n} {'up' if up else 'down'}\n"
                                                            for n in names),
                           text=True, capture_output=True, check=False)

    def check_switches(self) -> dict[str, str]:
        """The switches whose data-plane process is gone, with why (exit code, log tail). A
        switch killed a moment ago is waited for (at most 5 s) until the watcher has handled its
        exit, so a kill near a run's end is reported with that run, not lost in between."""
        if self.watcher is not None:
            for done in list(self._handled.values()):
                done.wait(5)
        out = dict(self.dead)
        for s in switches(self.graph):
            reason = self.net.get(s).died()
            if reason and s not in out:
                out[s] = reason
        return out
