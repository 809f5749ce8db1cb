"""The fidelity probe's sampling half on one server of a cluster (emulation/cluster/agent.py
runs it; the head merges its samples, emulation/cluster/fidelity.py).

Why a module of its own: only a cluster's servers sample this way; one machine's probe is
emulation/fidelity.py's FidelityProbe, whose helpers this reuses.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from agglab.emulation.fidelity import (COUNTERS, SAMPLE_SECONDS, _cpu_seconds, _machine_busy, _read_int,
                                       _Sampling, net_counters)


class ServerSampler(_Sampling):
    """The probe's sampling half on one server of a cluster (its agent runs it,
    emulation/cluster/agent.py): the counters of the interfaces it is given, the CPU time of
    every process whose pid file lies in one of `dirs()` (keyed by the file's stem: a switch's
    or a host's name), the server's busy time. `stop()` returns them JSON-ready, with this
    server's clock, for the head to merge (emulation/cluster/fidelity.py).

    Why on the server: the counters and processes are there; reading them over ssh once per
    sample would cost a round trip per server every 0.1 s."""

    def __init__(self, intfs: list[str], dirs, interval: float = SAMPLE_SECONDS):
        self.intfs, self.dirs, self.interval = list(intfs), dirs, interval
        self.counters: dict[str, list] = {i: [] for i in self.intfs}
        self.cpu: dict[str, list] = {}
        self.machine: list = []
        self.pids: dict[str, int] = {}
        self._thread_for("fidelity-sampler")

    def start(self) -> "ServerSampler":
        self._sample()
        self._thread.start()
        return self

    def _sample(self) -> None:
        now = time.monotonic()
        counters = net_counters()
        for intf in self.intfs:
            if intf in counters:
                self.counters[intf].append([now, *(counters[intf][c] for c in COUNTERS)])
        busy, total = _machine_busy()
        self.machine.append([now, busy, total])
        for d in self.dirs():
            for f in Path(d).glob("*.pid"):
                if f.stem not in self.pids:
                    pid = _read_int(str(f))
                    if pid:
                        self.pids[f.stem] = pid
        for name, pid in self.pids.items():
            cpu = _cpu_seconds(pid)
            if cpu is not None:
                self.cpu.setdefault(name, []).append([now, cpu])

    def stop(self) -> dict:
        self._halt()
        return {"counters": self.counters, "cpu": self.cpu, "machine": self.machine,
                "cores": os.cpu_count() or 1, "clock": time.monotonic()}
