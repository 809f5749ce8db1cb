"""What a reroute keeps: the carry of the in-network schemes' switch state across new trees.

Why a package of its own: a reroute (controller/tree_job.py) is the same steps for every
scheme (freeze, snapshot, reset, install, preload, publish); what differs is which registers
it reads and writes. The job talks only to a `Carry` (carry.py) chosen by the allreduce's
scheme through `CARRIES`, the controller's registry of in-network tree schemes; failover.py
(the dense pipeline's registers, the bulk read and write lines) and sparse_failover.py (the
sparse pipeline's custody) are its implementations.
"""

from controller.reroute.carry import CARRIES, Carried, Carry, carry_for
from controller.reroute.failover import reset, reset_lines

__all__ = ["CARRIES", "Carried", "Carry", "carry_for", "reset", "reset_lines"]
