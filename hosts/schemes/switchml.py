"""SwitchML on the hosts (`--algorithm switchml`): the dense agent (hosts/agent.py) over the
service transport, following the controller's reroutes between calls."""

from __future__ import annotations

from agglab.hosts.agent import allreduce as dense

SERVICE_TRANSPORT = True
CALLS_READY = True        # the agent calls comm.ready() once its call's state is built


def allreduce(comm, array):
    return dense(array, **comm.agent_options())
