"""Drop simulator (p4src/include/drop_sim.p4): per-port random loss on ingress and egress.

Same rule as the P4: draw r uniformly in [0, 0xFFFFFFFE] whenever the port's
entry runs set_drop_rate, drop when r < threshold.  The generator is Python's
seedable Mersenne Twister, so a run with a given seed loses the same packets
every time (BMv2's generator differs, so only thresholds 0 and 0xFFFFFFFF are
comparable across targets).
"""

from __future__ import annotations

import random

from agglab.ground import wire
from agglab.softswitch.registers import CounterArray
from agglab.softswitch.tables import KeySpec, Table

SET_DROP_RATE = "set_drop_rate"
STAT_SIM_DROP = wire.CONST["STAT_SIM_DROP"]
_ACTIONS = {SET_DROP_RATE: [("threshold", 32)], "NoAction": []}


class DropSim:
    def __init__(self, stats: CounterArray, seed: int | None = None):
        self.ingress_table = Table("drop_sim", [KeySpec("standard_metadata.ingress_port", "exact", 9)],
                                   _ACTIONS, default="NoAction", size=512)
        self.egress_table = Table("drop_sim_egress",
                                  [KeySpec("standard_metadata.egress_port", "exact", 9)],
                                  _ACTIONS, default="NoAction", size=512)
        self.rng = random.Random(seed)
        self.stats = stats

    def seed(self, seed: int | None) -> None:
        self.rng.seed(seed)

    def _drop(self, table: Table, port: int, nbytes: int) -> bool:
        action, params = table.exact.get((port,), table.default)
        if action != SET_DROP_RATE:
            return False
        r = self.rng.getrandbits(32)
        while r == 0xFFFFFFFF:                 # random(r, 0, 0xFFFFFFFE)
            r = self.rng.getrandbits(32)
        if r < params[0]:
            self.stats.count(STAT_SIM_DROP, nbytes)
            return True
        return False

    def ingress(self, port: int, nbytes: int) -> bool:
        """True when the frame is lost on the link into `port`."""
        t = self.ingress_table
        if not t.exact and t.default[0] == "NoAction":
            return False
        return self._drop(t, port, nbytes)

    def egress(self, port: int, nbytes: int) -> bool:
        """True when the frame is lost on the link out of `port`."""
        t = self.egress_table
        if not t.exact and t.default[0] == "NoAction":
            return False
        return self._drop(t, port, nbytes)
