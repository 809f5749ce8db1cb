"""The sparse (OmniReduce-style) worker: only non-zero blocks travel.

Protocol (docs/design/sparse.md "Sparse pipeline"); S slots, slot s walks its column of
K-blocks s, s+S, s+2S, ... in increasing order:

1. Lead round, on the dense pipeline (no SPARSE flag, AGG_FLAG_LEAD): zero values; on
   slot 0 also the consistency lanes, plus one lane that counts the workers running
   sparse (a dense peer would otherwise wait forever for data rounds that never come).
   Its `next_block` is the worker's first block of the column it will send (s if
   block s is non-zero, else its announcement after s) and `exp` that block's
   exponent: the switch registers them as the worker's sparse announcement, and the
   lead result names the column's first sparse round (the minimum) and its exponent
   (no forced round of block s: forced zero rounds cost frames that carry nothing).
2. Sparse rounds (flags |= AGG_FLAG_SPARSE).
   A result for block m (or the lead) names the column's next round m' (`next_block`, the
   minimum of everyone's announcements) and its agreed exponent (`exp`).  A worker
   sends m' only if m' is the block it announced; it then announces
   min(next non-zero block of its own in the column, m' + lookahead*S)
   (hosts/sparse_blocks.py; by default the look-ahead is unbounded, with a bound L a
   long zero run still sends a zero block every L rounds).  Otherwise it sends nothing and waits for the result.
   A result naming NEXT_NONE ends the column.

Why a worker must check the result's `next_block`: it can never exceed what the
worker itself announced, since the switch takes the minimum; a larger one means
the switch's sp_next registers hold another run's announcements (a second
sparse allreduce on the same job without resetting the sp_ registers or moving
to a new epoch), and the sums would be silently wrong, so SparseProtocolError.

Acknowledgements: the switch keeps a slot-version's round until every child is done
with it (docs/design/), so a worker that lost a result can still fetch it, however many
rounds it sits out.  A packet for block m' tells the switch its sender is done with
every round below m'; a worker that accepts round m's result and does not send in the
next round (or whose column is done) sends a header-only ACK (AGG_FLAG_ACK) for m.
When that ACK comes late (its sender handled the result after the others) a packet for
round m+2 may already have been held back at the switch; the root then sends the ACK to
the held worker as a release (RESULT|ACK, no values) and it sends again at once (`on_release`).

Loss: one timer per slot, as in the dense agent.  A participant resends its data
packet; a non-participant that has waited a timeout sends a probe: block m,
zero values, its current announcement (adds 0, changes nothing, and makes the
switch answer with the stored result if the round is complete).  On an epoch
change (`control`) every unfinished column resends its packet for the round it
is in, a probe for non-participants, so the new tree's sp_next is repopulated.

Versions: the lead round takes the dense agent's next version of the slot
(hosts/slots.py keeps it per transport and job); sparse round i of slot s uses
(sv0[s] + i) % 2, sv0 likewise continued across calls.

Why SparseRoundLostError still exists: before the acknowledgements, a worker that sat
out round m+1 did not hold the column back and round m+2 could reuse m's version while
it still lacked m's result. The switch now holds m+2 back until every child is done with
m (and a reroute keeps that custody, controller/reroute/sparse_failover.py), so seeing its version
reused means a broken switch or controller; the agent says so instead of summing wrong.
`every_round=True` (every worker sends in every round, non-participants a zero probe at
once) remains for a switch that completes a round only when every child sent.
"""

from __future__ import annotations

import weakref

import numpy as np

from agglab.ground import wire
from agglab.ground.runspec import SPARSE_WINDOW
from agglab.hosts.codec import BE, BLOCK, FLAGS, HEADER_BYTES, JOB, NEXT_BLOCK, SLOT, VER, lanes, unpack
from agglab.hosts.consistency import LANES_USED, check_lead, lead_lanes
from agglab.hosts.slots import SlotRun, check_call, save_versions, slot_versions, version_store
from agglab.hosts.sparse_blocks import NONE, SparseStats, announcements, first_blocks, nonzero_kblocks
from agglab.hosts.sparse_diagnostics import (DONE, LEAD, SPARSE, SparseMismatchError,  # noqa: F401
                                       SparseProtocolError, SparseRoundLostError,
                                       lost_message, timeout_message)

K = wire.K
FLAG_SPARSE = wire.CONST["AGG_FLAG_SPARSE"]
FLAG_ACK = wire.CONST["AGG_FLAG_ACK"]
FLAG_LEAD = wire.CONST["AGG_FLAG_LEAD"]
RELEASE = wire.FLAG_RESULT | FLAG_SPARSE | FLAG_ACK    # the root hands a held worker the ACK
# Rounds of a column a worker may announce ahead. Effectively unbounded: a worker announces
# its own next non-zero block. (It was 64: at 1M int32, window 128 and density 0.01 that
# forced ~100 zero rounds per worker on top of ~284, a third of the sparse run's frames.) A smaller bound
# remains an option (`lookahead=`): a long zero run then sends a zero block every L rounds.
DEFAULT_LOOKAHEAD = 1 << 24
SPARSE_LANE = LANES_USED            # slot-0 lead lane: 1 per worker running sparse
assert SPARSE_LANE < K
# transport -> {job: per-slot version of the next sparse round 0}, as slots.LEAD_VERSIONS
SPARSE_VERSIONS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def allreduce(array, *, transport, rank: int, workers: int, job: int = 0, tree: int = 0,
              epoch: int = 0, window: int | None = None, timeout: float = 0.02,
              give_up: float = 10.0, return_stats: bool = False, tree_of_slot=None,
              control=None, on_progress=None, sparse: bool = True, block_size: int = K,
              lookahead: int = DEFAULT_LOOKAHEAD, every_round: bool = False,
              link_mbps: float | None = None, tree_mbps: dict | None = None, ready=None):
    """Sparse allreduce; arguments and return as agglab.hosts.agent.allreduce, stats are SparseStats.

    block_size (a multiple of K) decides what counts as a non-zero block; lookahead
    bounds, in rounds of a column, how far ahead a worker announces.  every_round:
    a non-participant sends its zero probe at once in every round instead of after a
    timeout (for a switch that completes a round only when every child sent, the
    loss-safe variant discussed in the module docstring).
    """
    arr, window = check_call(array, rank, workers, window, default=SPARSE_WINDOW)
    if block_size < K or block_size % K:
        raise ValueError(f"block_size must be a positive multiple of K={K}, got {block_size}")
    if lookahead < 1:
        raise ValueError(f"lookahead must be >= 1 (rounds of a column), got {lookahead}")
    wire.pack_agg(job=job, tree=tree, epoch=epoch, worker=rank)   # range check of the fields
    run = SparseRun(arr, transport, rank, workers, job, tree, epoch, window, timeout, give_up,
                    tree_of_slot, control, on_progress, block_size, lookahead, every_round, link_mbps)
    run.path_rates(tree_mbps)
    run.ready = ready                  # the start gate, once the masks and announcements are built
    out = run.run()
    return (out, run.stats) if return_stats else out


class SparseRun(SlotRun):
    """One sparse allreduce: a lead round per slot, then the column's sparse rounds; the
    slot machinery (blocks, exponents, trees, timers, control, the loop) is hosts/slots.py's."""

    def __init__(self, arr, transport, rank, n, job, tree, epoch, window, timeout, give_up,
                 tree_of_slot, control, on_progress, block_size, lookahead, every_round, link_mbps=None):
        super().__init__(arr, transport, rank, n, job, tree, epoch, window, timeout, give_up,
                         tree_of_slot, control, on_progress, SparseStats, link_mbps)
        nb, S = self.nblocks, self.S
        # Why the rows and not the wire's bytes: a call's set-up is then O(array) numpy passes
        # only, and the non-zero blocks alone are converted (data_body), as they are sent.
        # Converting the whole array (4 MiB) up front took 5-8 ms a worker, at density 0.01 a
        # quarter of the run when 8 workers start at once on 2 cores (docs/measurements.md).
        rows = self.blocks if self.is_float else self.ints
        mask = nonzero_kblocks(rows, block_size)
        self.ann = announcements(mask, S, lookahead).tolist()
        self.phase = [LEAD] * S
        self.cur = list(range(S))              # block of the sparse round a slot is in
        # block this worker announced last, per slot: in the lead, its first block to send
        self.mine = first_blocks(mask, self.ann, S)
        self.rnd = [0] * S                     # sparse rounds completed, per slot
        self.sent_data = [False] * S           # our first packet of this round was data
        self.sent_first = [False] * S          # we sent in this round (data or eager probe)
        self.every_round = every_round
        self.sp_versions = version_store(SPARSE_VERSIONS, transport)
        self.sv0 = slot_versions(self.sp_versions, job, S)
        lead = lead_lanes(length=self.length, window=S, dtype=arr.dtype)
        lead[SPARSE_LANE] = 1
        self.lead0 = lead.astype(BE).tobytes()
        # (first send, resend) packers of the lead and the sparse rounds, and the ACK's
        self.lead_pack = self.packer(FLAG_LEAD), self.packer(FLAG_LEAD | wire.FLAG_RETX)
        self.sp_pack = self.packer(FLAG_SPARSE), self.packer(FLAG_SPARSE | wire.FLAG_RETX)
        self.ack_pack = self.packer(FLAG_SPARSE | FLAG_ACK)

    def is_open(self, s: int) -> bool:
        return self.phase[s] != DONE

    # -- sending ---------------------------------------------------------------------
    def _emit(self, s: int, packet: tuple, retx: bool, now: float) -> None:
        *fields, body = packet
        pack = (self.lead_pack if self.phase[s] == LEAD else self.sp_pack)[retx]
        payload = pack(self.trees[s], self.epoch, *fields) + body
        self.tx.send(payload)
        self.stats.packets_sent += 1
        self.last_sent[s] = self.leaves(len(payload), now)
        if retx:
            self.stats.retransmissions += 1

    def _ack(self, s: int, ver: int, m: int, now: float) -> None:
        """Header-only ACK: this worker is done with slot s's round m (version ver), so the
        switch may reuse the version.  Sent once; if lost, this worker's next packet of the
        column (data, or a probe after a timeout) acknowledges m too (its block is > m)."""
        payload = self.ack_pack(self.trees[s], self.epoch, ver, s, 0, m, self.mine[s])
        self.tx.send(payload)
        self.leaves(len(payload), now)          # it occupies the link like any frame
        self.stats.packets_sent += 1
        self.stats.acks += 1

    def send_round(self, s: int, now: float) -> None:
        """First packet of the slot's current round: lead, data, an eager probe or nothing."""
        nb, data = self.nblocks, False
        if self.phase[s] == LEAD:
            first = self.mine[s]
            self.packet[s] = (self.v0[s] & 1, s, self.exps[first] if first != NONE else 0, s, first,
                              self.lead0 if s == 0 else self.zero_body)
        elif self.cur[s] == self.mine[s]:
            m = self.cur[s]
            self.mine[s] = nxt = self.ann[m]
            self.packet[s] = ((self.sv0[s] + self.rnd[s]) & 1, s, self.exps[nxt] if nxt != NONE else 0,
                              m, nxt, self.data_body(s, m))
            data = True
            self.stats.blocks_sent += 1
        else:
            self.packet[s] = self._probe_packet(s) if self.every_round else None
        self.sent_data[s], self.sent_first[s] = data, self.packet[s] is not None
        if self.packet[s] is not None:
            self._emit(s, self.packet[s], False, now)
            now = self.sent_at[s] = self.last_sent[s]
        else:
            self.sent_at[s] = now               # a non-participant's wait: timed from the last result
        self.arm(s, now)

    def _probe_packet(self, s: int) -> tuple:
        mine = self.mine[s]
        self.stats.probes += 1
        return ((self.sv0[s] + self.rnd[s]) & 1, s, self.exps[mine] if mine != NONE else 0,
                self.cur[s], mine, self.zero_body)

    def resend(self, s: int, now: float) -> None:
        if self.packet[s] is None:              # non-participant: its first probe
            self.packet[s] = self._probe_packet(s)
        self._emit(s, self.packet[s], True, now)

    def before_expiry(self, now: float) -> None:
        """Handle results that arrived since the loop's last drain, before any timer fires.

        Why: under docs/design/'s rules a packet for a round whose result is already here
        is not harmless.  The column may have gone on without this worker, and if
        the version has been reused by then, the packet restarts a round there (see
        test_hosts_sparse_loss.py).  Such a spurious resend must be as rare as possible.
        """
        self.drain(now)

    # -- receiving -------------------------------------------------------------------
    def on_release(self, p: bytes, now: float) -> None:
        """The root sent us the ACK that freed slot s's version `ver` (docs/design/sparse.md,
        "Release"): our packet for a new round on it was held back. If our current round is
        still on that version and we sent data for it, that packet goes again now, as a first
        transmission (no RETX; its round trip is timed from here): the held packet was
        dropped before it touched any state, and waiting for the timer cost a whole RTO
        (random blocks, 8 workers at 5 Mb/s: ~800 such waits per rank)."""
        w = unpack(p)
        s = SLOT(w)
        if (JOB(w) != self.job or s >= self.S or self.phase[s] != SPARSE or not self.sent_data[s]
                or self.packet[s] is None or self.cur[s] <= BLOCK(w)
                or VER(w) != (self.sv0[s] + self.rnd[s]) & 1):
            return
        self.stats.releases += 1
        self._emit(s, self.packet[s], False, now)
        self.sent_at[s] = self.last_sent[s]
        self.arm(s, self.sent_at[s])

    def on_payload(self, p: bytes, now: float) -> bool:
        """Handle one payload; True if it was an accepted (progress-making) result."""
        if len(p) == HEADER_BYTES and FLAGS(unpack(p)) & RELEASE == RELEASE:
            self.on_release(p, now)
            return False
        w = self.result_words(p)
        if w is None:
            return False
        flags, s = FLAGS(w), SLOT(w)
        phase = self.phase[s]
        if phase == LEAD:
            ok = (not flags & FLAG_SPARSE and flags & FLAG_LEAD and VER(w) == self.v0[s] & 1
                  and BLOCK(w) == s)
        else:
            ok = (phase == SPARSE and flags & FLAG_SPARSE and BLOCK(w) == self.cur[s]
                  and VER(w) == (self.sv0[s] + self.rnd[s]) & 1)
        if not ok:
            if (phase == SPARSE and not self.every_round and flags & FLAG_SPARSE
                    and VER(w) == (self.sv0[s] + self.rnd[s]) & 1 and BLOCK(w) > self.cur[s]):
                raise SparseRoundLostError(lost_message(self, s, BLOCK(w)))
            self.stats.duplicates_ignored += 1
            return False
        # Every round is sampled, a non-participant's too (from the result before, as its timer
        # runs): its wait is result to result, longer than any participant's send to result by
        # the slowest participant's turnaround; sampling only participants (1 round in 10 at
        # density 0.1) kept the timers under it and 15-20% of the waits probed (random blocks,
        # 16 workers on a k=4 fat-tree: 2,424 probes in 16,280 packets).
        self.sample_rtt(s, w, now)
        if phase == LEAD:
            self._lead_result(s, lanes(p), NEXT_BLOCK(w))
        else:
            acked = (VER(w), self.cur[s])
            self._sparse_result(s, lanes(p), NEXT_BLOCK(w))
        self.accepted(s, w, now)
        if self.phase[s] == DONE:
            self.remaining -= 1
        else:
            self.send_round(s, now)
        if phase == SPARSE and (self.phase[s] == DONE or not self.sent_first[s]):
            self._ack(s, *acked, now)           # no packet of the next round says it for us
        return True

    def _lead_result(self, s: int, lanes: np.ndarray, first: int) -> None:
        if s == 0:
            check_lead(lanes, n=self.n, rank=self.rank, length=self.length,
                       window=self.S, dtype=self.dtype)
            if int(lanes[SPARSE_LANE]) != self.n:
                raise SparseMismatchError(
                    f"rank {self.rank}: only {int(lanes[SPARSE_LANE])} of {self.n} workers run "
                    f"the sparse allreduce; all workers must pass the same sparse=")
        if first != NONE and (first < s or first % self.S != s) or first > self.mine[s]:
            raise SparseProtocolError(
                f"rank {self.rank}: slot {s} lead result names first block {first:#x} but this "
                f"worker announced {self.mine[s]:#x}; the switch does not register sparse leads "
                f"(AGG_FLAG_LEAD), or its state is stale")
        self._settle(s, s, first)

    def _settle(self, s: int, m: int, nxt: int) -> None:
        """Blocks m, m+S, ... below nxt are settled (the ones nobody sent are zero); nxt
        (NEXT_NONE: nothing more) is the column's next round."""
        last = s + (self.nblocks - 1 - s) // self.S * self.S          # the column's last block
        self.done += ((nxt if nxt != NONE else last + self.S) - m) // self.S
        if self.on_progress is not None:
            self.on_progress(self.done, self.nblocks)
        if nxt == NONE:
            self.phase[s] = DONE
        else:
            self.phase[s], self.cur[s] = SPARSE, nxt

    def _sparse_result(self, s: int, lanes: np.ndarray, nxt: int) -> None:
        m = self.cur[s]
        if nxt <= m or nxt > self.mine[s]:
            raise SparseProtocolError(
                f"rank {self.rank}: slot {s} result for block {m} names next block {nxt:#x} "
                f"but this worker announced {self.mine[s]:#x}; the switch's sp_next registers "
                f"hold stale announcements (reset the sp_ registers or use a new epoch before "
                f"every sparse allreduce of a job)")
        self.sums[m] = lanes
        if self.is_float:
            self.used_exp[m] = self.agreed[s]
        self.rnd[s] += 1
        self.stats.rounds += 1
        self._settle(s, m, nxt)

    # -- the loop --------------------------------------------------------------------
    def timeout_message(self, idle: float) -> str:
        return timeout_message(self, idle)

    def run(self) -> np.ndarray:
        try:
            out = super().run()
        except BaseException:
            self.sp_versions.pop(self.job, None)
            raise
        save_versions(self.sp_versions, self.job, [(v + r) & 1 for v, r in zip(self.sv0, self.rnd)])
        return out
