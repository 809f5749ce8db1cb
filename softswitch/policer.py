"""The port policer (p4src/include/policer.p4): frames from a port in no job, metered.

Why: nothing else limits a port that belongs to no job. Its aggregation frames are all
rejected (no agg_job entry), but each one still costs the switch a parse and a lookup, so a
host in no job flooding a switch took the switch's time from the jobs (64k frames/s cut a
running job to 29% of its rate). The controller puts every port that leads to a host in no
job into `port_policer`; every frame from such a port first runs the port's meter
(`port_meter`, indexed by port number), and a red frame is dropped before anything else
looks at it, counted as a reject (`STAT_REJECT`, `agg_rejects[REJ_POLICED]`).

The meter is v1model's two-rate three-colour marker (RFC 2698) in packets: a committed and
a peak bucket, rates in packets per microsecond as BMv2's `meter_set_rates NAME I
cir:cbs pir:pbs` takes them; a frame is red when the peak bucket holds less than one
token, yellow when only the committed one does, else green (yellow frames pass: only red
is policed). A meter whose rates were never set marks every frame green (BMv2 alike).

The daemon meters a whole receive batch at once (`admit`: the frames of one recvmmsg
arrive at one instant, so it is the per-frame rule applied n times), and drops the red
tail without copying it: a flood then costs the switch a system call per batch, not a
pipeline run per frame. `clock` is injectable for tests (seconds, monotonic).
"""

from __future__ import annotations

import time

from agglab.ground import wire
from agglab.softswitch.registers import CounterArray
from agglab.softswitch.tables import KeySpec, Table

GREEN, YELLOW, RED = 0, 1, 2
POLICE = "police"
STAT_REJECT = wire.CONST["STAT_REJECT"]
REJ_POLICED = wire.CONST["REJ_POLICED"]
METER = "port_meter"
METER_SIZE = 512                     # one per port number (bit<9>)


class Meter:
    """One trTCM in packets (rates per microsecond, bursts in packets)."""

    __slots__ = ("cir", "cbs", "pir", "pbs", "tc", "tp", "last")

    def __init__(self):
        self.cir = self.cbs = self.pir = self.pbs = None
        self.tc = self.tp = 0.0
        self.last = None

    def set_rates(self, cir: float, cbs: int, pir: float, pbs: int) -> None:
        if cir < 0 or pir < 0 or cbs < 0 or pbs < 0:
            raise ValueError("meter rates and bursts must not be negative")
        if pir < cir:
            raise ValueError("the peak rate must not be below the committed rate")
        self.cir, self.cbs, self.pir, self.pbs = cir, cbs, pir, pbs
        self.tc, self.tp, self.last = float(cbs), float(pbs), None     # buckets start full

    @property
    def configured(self) -> bool:
        return self.pir is not None

    def _refill(self, now_us: float) -> None:
        if self.last is not None and now_us > self.last:
            dt = now_us - self.last
            self.tc = min(self.cbs, self.tc + self.cir * dt)
            self.tp = min(self.pbs, self.tp + self.pir * dt)
        self.last = now_us if self.last is None else max(self.last, now_us)

    def color(self, now_us: float) -> int:
        """One frame's colour at `now_us`."""
        if not self.configured:
            return GREEN
        self._refill(now_us)
        if self.tp < 1:
            return RED
        self.tp -= 1
        if self.tc < 1:
            return YELLOW
        self.tc -= 1
        return GREEN

    def admit(self, n: int, now_us: float) -> int:
        """How many of `n` frames arriving at `now_us` are not red (color() n times)."""
        if not self.configured:
            return n
        self._refill(now_us)
        k = min(n, int(self.tp))
        self.tp -= k
        self.tc -= min(k, int(self.tc))
        return k


class PortPolicer:
    """`port_policer` (ingress_port exact -> police | NoAction) and `port_meter`."""

    def __init__(self, stats: CounterArray, rejects: CounterArray, clock=time.monotonic):
        self.table = Table("port_policer", [KeySpec("standard_metadata.ingress_port", "exact", 9)],
                           {POLICE: [], "NoAction": []}, default="NoAction", size=METER_SIZE)
        self.meters = [Meter() for _ in range(METER_SIZE)]
        self.stats, self.rejects, self.clock = stats, rejects, clock

    def polices(self, port: int) -> bool:
        return bool(self.table.exact) and self.table.exact.get((port,), self.table.default)[0] == POLICE

    def red(self, port: int, nbytes: int) -> bool:
        """One frame from `port`: True when it is policed (dropped and counted)."""
        if not self.polices(port):
            return False
        if self.meters[port].color(self.clock() * 1e6) != RED:
            return False
        self._count(1, nbytes)
        return True

    def admit(self, port: int, n: int, nbytes: int = 0) -> int:
        """A batch of `n` frames from `port` (`nbytes` in all): how many pass; the rest are
        dropped and counted (their bytes pro rata)."""
        if not self.polices(port):
            return n
        k = self.meters[port].admit(n, self.clock() * 1e6)
        if k < n:
            self._count(n - k, nbytes * (n - k) // max(1, n))
        return k

    def _count(self, frames: int, nbytes: int) -> None:
        self.stats.packets[STAT_REJECT] += frames
        self.stats.bytes[STAT_REJECT] += nbytes
        self.rejects.packets[REJ_POLICED] += frames
        self.rejects.bytes[REJ_POLICED] += nbytes

    def set_rates(self, index: int, cir: float, cbs: int, pir: float, pbs: int) -> None:
        if not 0 <= index < METER_SIZE:
            raise IndexError(f"meter index {index} out of range (0..{METER_SIZE - 1})")
        self.meters[index].set_rates(cir, cbs, pir, pbs)

    def get_rates(self, index: int) -> list[tuple[float, int]] | None:
        m = self.meters[index]
        return [(m.cir, m.cbs), (m.pir, m.pbs)] if m.configured else None

    def reset(self) -> None:
        self.table.reset()
        self.meters = [Meter() for _ in range(METER_SIZE)]
