"""Hung switches on a cluster's servers: found and fenced as on one machine.

Why a mixin of its own: the liveness probe (emulation/switch_probe.py) and the fence
(emulation/switch_failures.py) assume the switch's process is a local child; on a cluster
the local process is the ssh that started the switch on its server. Three things differ:
- the ping crosses the head's ssh forward of each control socket (BMv2: the server's Thrift
  address), so it gets HANG_BOUND (2.5 s, BMv2's) rather than a local socket's 0.5 s, and no
  starvation test (the switch's threads are on its server, /proc here does not see them);
- the fence, a SIGKILL, is sent on the server through its agent (`signal SIG PID`): killing
  the ssh here would leave a stopped switch there. Its ssh then exits and the exit watcher
  takes it from there, exactly as for a killed switch (rerouted around, restartable);
- the process state recorded with a hang is read on the server (a SIGSTOP reads "stopped"),
  so a run record, and the test suite's audit, tell a scripted hang from a false alarm.
`hang_switch` (--hang-switch, the lab's `hang`) SIGSTOPs through the same agent.
"""

from __future__ import annotations

import signal

from agglab.emulation.switch_probe import BMV2_HANG_BOUND, STATES, SoftPing, ThriftPing


class ClusterHangs:
    """The hang methods of ClusterNetwork (its switches are on servers, see above)."""

    LIVENESS_PROBE = True
    HANG_BOUND = BMV2_HANG_BOUND      # a ping's bound here: it crosses ssh, no starvation test helps

    def _ping_channel(self, name: str):
        node = self.net.get(name)
        chan = (SoftPing(str(node.control_path)) if self.backend == "soft"
                else ThriftPing(node.thrift_port, host=node.thrift_ip))
        chan.bound = max(self.HANG_BOUND, getattr(chan, "bound", 0) or 0)
        return chan

    def _process_state(self, name: str) -> str | None:
        """The switch's process state read on its server (the local pid is its ssh's)."""
        pid = self.net.get(name).proc.remote_pid
        r = self.remotes[self.placement[name]].run(f"cat /proc/{pid}/stat", check=False, timeout=10)
        code = r.stdout.rpartition(")")[2].split()[:1] if r.returncode == 0 else []
        return STATES.get(code[0], code[0]) if code else None

    def _signal_switch(self, name: str, sig: int) -> None:
        """`sig` to the switch's process on its server (the pid here is its ssh's), through
        the server's agent; without one, a SIGKILL ends the ssh (and with it the switch)."""
        proc = self.net.get(name).proc
        agent = self.agents.get(self.placement[name])
        if agent is not None and agent.proc.poll() is None:
            agent.tell(f"signal {int(sig)} {proc.remote_pid}")
        elif sig == signal.SIGKILL:
            proc.kill()

