"""What the host baselines (ring, ps) share: the hosts sum over TCP with their peers (the
seats' addresses), over connections the communicator keeps open between calls
(`Communicator.tcp_mesh`); the call that opened them reports how long that took as its
`setup_seconds`. A private module: not a scheme of its own."""

from __future__ import annotations

from importlib import import_module

from agglab.hosts import tcp_mesh   # its BASE_PORT read at use (a harness moves it)


def host_baseline(module_name: str, options=lambda spec: {}):
    """(allreduce, prepare) of the baseline implemented in `module_name` (its `connections`
    and `allreduce`), imported on first use; `options(spec)` are its own keywords (ps: layout)."""
    def prepare(comm, array) -> None:
        m = import_module(module_name)
        comm.tcp_mesh(comm.spec.algorithm, m.connections, array)

    def allreduce(comm, array):
        m = import_module(module_name)
        mesh = comm.tcp_mesh(comm.spec.algorithm, m.connections, array)
        try:
            result, stats = m.allreduce(array, rank=comm.rank, peers=comm.plan.peers(), port=tcp_mesh.BASE_PORT + comm.spec.job,
                                        give_up=comm.spec.give_up, return_stats=True, on_progress=comm.block_progress,
                                        link_mbps=comm.seat.link_mbps, mesh=mesh, **options(comm.spec))
        except BaseException:
            comm.close()                 # a failed call leaves its connections out of step
            raise
        stats.setup_seconds, comm._setup_seconds = comm._setup_seconds, 0.0
        return result, stats
    return allreduce, prepare
