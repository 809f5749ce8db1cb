"""What a sparse allreduce says when it gives up or detects a lost round.

Why apart from hosts/sparse_agent.py: the wording is read by people (failing
runs, experiment reports) and changes independently of the event loop, as
hosts/diagnostics.py does for the dense agent.  `run` is a
agglab.hosts.sparse_agent.SparseRun.
"""

from __future__ import annotations

from agglab.ground import wire
from agglab.hosts.consistency import ConsistencyError

LEAD, SPARSE, DONE = 0, 1, 2     # phases of a slot


class SparseMismatchError(ConsistencyError):
    """Some workers of the job run the dense agent, others the sparse one."""


class SparseProtocolError(RuntimeError):
    """A result contradicts this worker's own announcements (stale switch state)."""


class SparseRoundLostError(SparseProtocolError):
    """The switch reused the version holding a result this worker never received."""


def _slot_state(run, s: int) -> str:
    if run.phase[s] == LEAD:
        return f"lead, ver {run.v0[s] & 1}"
    role = "sent its data" if run.sent_data[s] else "not participating"
    mine = "none" if run.mine[s] == wire.NEXT_NONE else run.mine[s]
    return (f"sparse block {run.cur[s]}, {role}, announced next {mine}, "
            f"ver {(run.sv0[s] + run.rnd[s]) & 1}")


def timeout_message(run, idle: float) -> str:
    """Like the dense message, per column: lead or sparse block, sending or waiting."""
    open_slots = [s for s in range(run.S) if run.phase[s] != DONE]
    parts = [f"slot {s} ({_slot_state(run, s)}, tree {run.trees[s]}, {run.tries[s]} "
             f"retransmissions)" for s in open_slots[:8]]
    more = f" and {len(open_slots) - 8} more" if len(open_slots) > 8 else ""
    st = run.stats
    msg = (f"rank {run.rank}: sparse allreduce of job {run.job} epoch {run.epoch} made no "
           f"progress for {idle:.2f} s; {len(open_slots)} of {run.S} columns unfinished: "
           f"{'; '.join(parts)}{more}. {run.done}/{run.nblocks} blocks settled, "
           f"{st.rounds} sparse rounds, {st.blocks_sent} data blocks sent, {st.probes} probes, "
           f"{st.retransmissions} retransmissions, {st.results_accepted} results accepted, "
           f"{st.duplicates_ignored} duplicates, {st.foreign_ignored} foreign packets ignored")
    if st.results_accepted == 0:
        msg += (". No result ever arrived: check the switch is up and programmed for this job "
                "(the agg_job entry, dense and sparse alike, for job/tree/epoch on this worker's port, "
                "fan_in = workers, multicast group, agg_reply) and that every worker started")
    return msg


def lost_message(run, s: int, seen: int) -> str:
    """A result for a later block arrived on the version this worker still waits on."""
    return (f"rank {run.rank}: slot {s} waits for the result of block {run.cur[s]} "
            f"({_slot_state(run, s)}) but the switch already holds block {seen} in that "
            f"version: the switch reused the version before this worker acknowledged the "
            f"round (its custody rule or the controller's reroute carry is broken, see "
            f"docs/design/ sparse pipeline); the sum cannot be recovered")
