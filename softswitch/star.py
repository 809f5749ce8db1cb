"""The control program of a one-switch star: workers on ports 1..n as the children of one
job (agg_job entries, for the dense and the sparse pipeline alike), multicast group 1, and
results addressed back to each worker. Shared by the in-process benchmark and the test
harnesses, which all need exactly this switch without a Mininet network or a controller.
"""

from __future__ import annotations

from agglab.ground.addresses import SERVICE_IP, SERVICE_MAC, host_ip, host_mac
from agglab.softswitch.roles import job_entry


def star_commands(n: int, job: int = 0, tree: int = 0, epoch: int = 0, ranks: bool = False) -> list[str]:
    """ranks: each port's entry names its worker's rank, as the controller installs it (only
    then may the sparse root send a worker a release); else any worker field is accepted."""
    ports = " ".join(str(i + 1) for i in range(n))
    cmds = ["mc_mgrp_create 1", f"mc_node_create 0 {ports}", "mc_node_associate 1 0"]
    for i in range(n):
        cmds.append(job_entry(job, tree, epoch, i + 1, child=i, fan_in=n, mgrp=1,
                              worker=i if ranks else None).command())
        cmds.append(f"table_add agg_reply agg_set_dst {i + 1} => {SERVICE_MAC} {SERVICE_IP} "
                    f"{host_mac(i + 1)} {host_ip(i + 1)}")
    return cmds
