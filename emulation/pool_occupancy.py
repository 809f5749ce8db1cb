"""The aggregator pool's occupancy over a run, sampled from the switches' own registers.

Why sample the switch: which aggregators are held is state only the data plane has (atp.p4's
atp_bitmap: non-zero = held by some (job, seq); the dense pipeline's agg_bitmap likewise for
a partitioned scheme's slots). Reading it while the jobs run shows what the ATP paper's
argument rests on: a shared pool is filled by whichever job is communicating, while a
static partition idles while its job computes. A thread reads the register of each
aggregating switch every `interval` seconds through the controller's switch clients (one
command per switch: the whole register) and keeps (t, {switch: held}); t counts from the
start of the workers' launch, so the first seconds are the processes starting.
"""

from __future__ import annotations

import threading
import time

from agglab.ground import wire

REGISTER = {True: "atp_bitmap", False: "agg_bitmap"}     # shares_pool -> the register of held slots
# agg_bitmap has two versions of each slot (the shadow copy, index slot + SLOTS x ver): a slot
# is held when either version is; atp_bitmap has one entry per aggregator
WRAP = {True: None, False: wire.SLOTS}
INTERVAL = 0.1


class PoolSampler:
    def __init__(self, clients: dict, switches: list[str], shares_pool: bool, interval: float = INTERVAL):
        self.clients, self.switches = clients, sorted(switches)
        self.register, self.interval, self.wrap = REGISTER[shares_pool], interval, WRAP[shares_pool]
        self.samples: list[tuple[float, dict[str, int]]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="pool-occupancy", daemon=True)
        self.errors = 0

    def start(self) -> "PoolSampler":
        self.t0 = time.monotonic()
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            t = time.monotonic() - self.t0
            held = {}
            for sw in self.switches:
                try:
                    values = self.clients[sw].register_read(self.register)
                    held[sw] = len({i % self.wrap if self.wrap else i for i, v in enumerate(values) if v})
                except Exception:  # noqa: BLE001 - a dead or busy switch: no sample from it this time
                    self.errors += 1
            self.samples.append((round(t, 4), held))
            self._stop.wait(self.interval)

    def stop(self) -> dict:
        """Stop sampling; the series: register, switches, t (s), per switch held, total held."""
        self._stop.set()
        self._thread.join(5)
        return {"register": self.register, "interval_s": self.interval, "switches": self.switches,
                "t": [t for t, _ in self.samples],
                "held": {sw: [h.get(sw) for _, h in self.samples] for sw in self.switches},
                "total": [sum(h.values()) for _, h in self.samples], "read_errors": self.errors}
