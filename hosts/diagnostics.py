"""What an allreduce reports: its statistics, and the reason when it gives up.

Why a module of its own: the numbers and the wording are read by people
(experiment reports, failing CI runs), so they are kept apart from the event
loop in hosts/agent.py and can be changed without touching the protocol.
"""

from __future__ import annotations

from dataclasses import dataclass


class AllreduceTimeout(TimeoutError):
    """No progress for `give_up` seconds; the message says which slots/blocks are missing."""


class NetworkPartitionError(RuntimeError):
    """The controller found no tree connecting all workers (a link failure partitioned them)."""


@dataclass
class AllreduceStats:
    packets_sent: int = 0
    retransmissions: int = 0
    duplicates_ignored: int = 0
    foreign_ignored: int = 0      # not a result of this job, or malformed
    results_accepted: int = 0
    seconds: float = 0.0
    blocks: int = 0
    slots: int = 0
    srtt: float | None = None
    epoch_changes: int = 0
    batches: int = 0              # receive batches handled (payloads per batch: how well calls amortise)
    rto_backoffs: int = 0         # times the shared RTO doubled on timeouts (hosts/rto.py timed_out)


def timeout_message(run, idle: float) -> str:
    """Names the unfinished slots (round, block, version, tree, retransmissions) and hints."""
    open_slots = [s for s in range(run.S) if run.round[s] < run.rounds[s]]
    parts = []
    for s in open_slots[:8]:
        r = run.round[s]
        what = "lead" if r == 0 else f"block {run.block_id(s, r)}"
        parts.append(f"slot {s} round {r} ({what}, ver {(run.v0[s] + r) & 1}, tree "
                     f"{run.trees[s]}, {run.tries[s]} retransmissions)")
    more = f" and {len(open_slots) - 8} more" if len(open_slots) > 8 else ""
    done = sum(max(0, r - 1) for r in run.round)
    st = run.stats
    msg = (f"rank {run.rank}: allreduce of job {run.job} epoch {run.epoch} made no progress "
           f"for {idle:.2f} s; {len(open_slots)} of {run.S} slots unfinished: "
           f"{'; '.join(parts)}{more}. {done}/{run.nblocks} blocks done, "
           f"{st.packets_sent} packets sent, {st.retransmissions} retransmissions, "
           f"{st.results_accepted} results accepted, {st.duplicates_ignored} duplicates, "
           f"{st.foreign_ignored} foreign packets ignored")
    if st.results_accepted == 0:
        msg += (". No result ever arrived: check the switch is up and programmed for this job "
                "(agg_job entry for job/tree/epoch on this worker's port, fan_in = workers, "
                "multicast group, agg_reply) and that every worker started; until a first "
                "result arrives only slot 0 is retransmitted")
    return msg
