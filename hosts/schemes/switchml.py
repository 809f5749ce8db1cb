"""SwitchML on the hosts (`--algorithm switchml`): the dense agent (hosts/agent.py) over the
service transport, following the controller's reroutes between calls."""

from __future__ import annotations

SERVICE_TRANSPORT = True


def allreduce(comm, array):
    from hosts.agent import allreduce as dense

    return dense(array, **comm.agent_options())
