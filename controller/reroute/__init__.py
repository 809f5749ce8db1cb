"""The reroute: a tree job's live move to new trees, and what it keeps (the carry).

Why a package of its own: a reroute is the same steps for every scheme (freeze, snapshot,
reset, install, preload, publish), and a procedure of its own beside the job
(controller/tree_job.py keeps what a job is: install, state, link and switch events,
standby). run.py starts it (its priority); bulk.py runs it in rounds of batches where every
switch pipelines them, steps.py one step after the other elsewhere; record.py is its
failure record (REROUTE_PHASES). What differs per scheme is which registers it reads and
writes: the reroute talks only to a `Carry` (carry.py) chosen by the allreduce's scheme
through the factory the job was given (controller/schemes `carry_for`, the controller's
registry of schemes, which sits above this package); failover.py (the
dense pipeline's registers, the bulk read and write lines) and sparse_failover.py (the
sparse pipeline's custody) are its implementations.
"""

from agglab.controller.reroute.carry import Carried, Carry, DenseCarry, SparseCarry
from agglab.controller.reroute.failover import reset, reset_lines

__all__ = ["Carried", "Carry", "DenseCarry", "SparseCarry", "reset", "reset_lines"]
