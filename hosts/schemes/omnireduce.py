"""OmniReduce on the hosts (`--algorithm omnireduce`): the block-sparse agent
(hosts/sparse_agent.py) over the service transport."""

from __future__ import annotations

from agglab.hosts.sparse_agent import allreduce as sparse

SERVICE_TRANSPORT = True
CALLS_READY = True        # the agent calls comm.ready() once its call's state is built


def allreduce(comm, array):
    """Block-sparse allreduce; repeated calls need no register reset in between (each
    call's dense lead round re-arms the switch's sparse slots, docs/design/sparse.md "Sparse pipeline")."""
    return sparse(array, block_size=comm.spec.blocks, **comm.agent_options())
