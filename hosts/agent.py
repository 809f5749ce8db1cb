"""The SwitchML worker: `allreduce` an array through an aggregating switch.

Protocol (docs/design/host-agent.md "Host agent"): the array is cut into blocks of K values
(last one zero-padded).  S = min(window, blocks) slots are used, each walking
its own column of blocks: round 0 of slot s is a LEAD round (zero values, the
exponent of the slot's first block; on slot 0 also the consistency lanes of
hosts/consistency.py), data block j travels on slot j % S in round 1 + j // S.
Each packet carries the exponent of the sender's next block on that slot, so
the result's max exponent is the scale every worker uses for the next round.
int32 arrays go raw (exact wrap-around sum, exp 0).

Versions: round r of slot s uses version (v0[s] + r) % 2.  v0 is 0 on a fresh
switch, which gives docs/design/'s `round % 2`; later calls on the same transport
and job continue each slot's alternation (harmless on reset registers), because the switch
still holds the last round's completed version and would answer a new packet
of that version with the stale result.  After an error the switch state is
unknown: reset the registers or move to a new epoch.

Trees and epochs (docs/design/trees.md "Aggregation trees"): slot s travels on tree
tree_of_slot[s].  `control()` is polled every CONTROL_POLL seconds (less often in a job
of more than CONTROL_POLL_WORKERS, hosts/slots.py control_poll); when it
returns a new epoch (and/or tree_of_slot) every outstanding packet is rebuilt
with it and retransmitted at once.  Results are accepted whatever their epoch
or tree (slot numbers are unique within a job).

Batches: results are handled a receive batch at a time (`DenseRun.on_batch`): each
header is read in place from the receive arena with one struct call, the accepted
results' lanes are copied into the sums with one numpy call per batch, the next rounds'
packets are staged and leave with one system call. Why: eight agents share two cores with
the switch, and per-packet objects, dict lookups and small numpy calls made them, not the
links, the bottleneck (1,500 resends and 1.91x the wire time at 20 Mb/s). Doing the whole batch in numpy was measured and is
slower: a batch holds ~20 results at 20 Mb/s, too few to pay for thirty numpy calls.

Loss: one timer per slot (RTO from hosts/rto.py, which also explains which
latencies are sampled and why), per-slot exponential backoff capped at
MAX_RTO; the identical packet is resent with AGG_FLAG_RETX.  Until the first
result arrives only slot 0 retransmits (a probe): silence then means peers
still starting or a switch not answering, and resending the whole window
would only load the switch with duplicates.  Results for an old round or the
other version are duplicates and ignored.  No accepted result for `give_up`
seconds raises AllreduceTimeout naming what is missing.
"""

from __future__ import annotations

import numpy as np

from agglab.ground import wire
from agglab.hosts import native, sparse_agent
from agglab.hosts.codec import BE, PAYLOAD_BYTES, lanes, lanes_of, unpack
from agglab.hosts.protocol import LAYOUT
from agglab.hosts.consistency import (DTYPES, ConsistencyError, DtypeMismatchError,  # noqa: F401 (API)
                               LengthMismatchError, WindowMismatchError,
                               WorkerCountMismatchError, check_lead)
from agglab.hosts.diagnostics import (AllreduceStats, AllreduceTimeout, NetworkPartitionError,  # noqa: F401 (API)
                               timeout_message)
from agglab.hosts.slots import CONTROL_POLL, DEFAULT_WINDOW, SlotRun, check_call  # noqa: F401 (API)
from agglab.hosts.transport import Transport, UdpTransport  # noqa: F401 (API)

K = wire.K


def allreduce(array, *, transport: Transport, rank: int, workers: int, job: int = 0,
              tree: int = 0, epoch: int = 0, window: int | None = None,
              timeout: float = 0.02, give_up: float = 10.0, return_stats: bool = False,
              tree_of_slot=None, control=None, on_progress=None, sparse: bool = False,
              block_size: int | None = None, lookahead: int | None = None, link_mbps: float | None = None,
              tree_mbps: dict | None = None, ready=None, **sparse_options):
    """Sum `array` (float32 or int32, any shape/length) over `workers` agents via the switch.

    Returns an array of the same shape and dtype, or (array, AllreduceStats) with
    return_stats=True.  `timeout` is the initial retransmission timeout,
    `give_up` the seconds without any progress before AllreduceTimeout.
    `tree_of_slot` (one tree id per slot, overrides `tree`), `control` (callable
    returning None or {"epoch": e, "tree_of_slot": [...]} on a reroute) and
    `on_progress(done_blocks, total_blocks)` (called after each batch of results) connect the
    agent to the controller.
    `link_mbps`, this host's own link rate if known, starts each packet's timer when the
    packet leaves the link rather than when it is queued (hosts/slots.py `leaves`).
    `tree_mbps` (tree id -> its slowest link's Mb/s, from the epoch file) keeps the timers
    above the queue a full window makes there (hosts/slots.py `path_rates`).
    `ready()`, if given, is called once the call's state is built, just before its first packet
    (hosts/communicator.py `ready`: the start gate).
    Raises a ConsistencyError subclass (LengthMismatchError, DtypeMismatchError,
    WindowMismatchError, WorkerCountMismatchError) when the workers disagree.
    `sparse=True` runs the block-sparse pipeline instead (hosts/sparse_agent.py; only
    there do `block_size`, `lookahead` and `sparse_options` apply; stats gain `blocks_sent`).
    """
    if sparse:
        extra = {k: v for k, v in (("block_size", block_size), ("lookahead", lookahead))
                 if v is not None}
        return sparse_agent.allreduce(
            array, transport=transport, rank=rank, workers=workers, job=job, tree=tree,
            epoch=epoch, window=window, timeout=timeout, give_up=give_up,
            return_stats=return_stats, tree_of_slot=tree_of_slot, control=control,
            on_progress=on_progress, link_mbps=link_mbps, tree_mbps=tree_mbps, ready=ready, **extra,
            **sparse_options)
    if block_size is not None or lookahead is not None or sparse_options:
        raise TypeError(f"block_size, lookahead and {sorted(sparse_options)} apply to sparse=True only")
    arr, window = check_call(array, rank, workers, window)
    wire.pack_agg(job=job, tree=tree, epoch=epoch, worker=rank)   # range check of the fields
    run = DenseRun(arr, transport, rank, workers, job, tree, epoch, window, timeout, give_up,
                   tree_of_slot, control, on_progress, link_mbps)
    run.path_rates(tree_mbps)
    run.ready = ready
    out = run.run()
    return (out, run.stats) if return_stats else out


# agg_h fields as (struct word, shift, mask): the result fields the dense loop reads
_F = {name: LAYOUT[name] for name in ("job", "flags", "ver", "slot", "worker", "exp", "block")}
_JOB_W, _JOB_S, _JOB_M = _F["job"]
_FLAGS_W, _FLAGS_S, _FLAGS_M = _F["flags"]
_VER_W, _VER_S, _VER_M = _F["ver"]
_SLOT_W, _SLOT_S, _SLOT_M = _F["slot"]
_WORKER_W, _WORKER_S, _WORKER_M = _F["worker"]
_EXP_W, _EXP_S, _EXP_M = _F["exp"]
_BLOCK_W, _BLOCK_S, _BLOCK_M = _F["block"]
RESULT, RETX, NEXT_NONE, DATA_BYTES = wire.FLAG_RESULT, wire.FLAG_RETX, wire.NEXT_NONE, wire.DATA_BYTES


class DenseRun(SlotRun):
    """One dense allreduce: round 0 of slot s is its lead round, round r >= 1 carries
    block s + (r - 1) * S; the slot machinery is hosts/slots.py's."""

    def __init__(self, arr, transport, rank, n, job, tree, epoch, window, timeout, give_up,
                 tree_of_slot, control, on_progress, link_mbps=None):
        super().__init__(arr, transport, rank, n, job, tree, epoch, window, timeout, give_up,
                         tree_of_slot, control, on_progress, AllreduceStats, link_mbps)
        S, nb = self.S, self.nblocks
        self.rounds = [1 + len(range(s, nb, S)) for s in range(S)]
        self.round = [0] * S
        # int32: every block travels, so the whole array in the wire's byte order at once
        self.raw = b"" if self.is_float else self.ints.astype(BE).tobytes()
        if not self.is_float:
            # int32 needs no exponents, so only slot 0 leads (its lanes carry the consistency
            # check); every other slot starts with its first data block on the version its
            # lead would have used. Why: a lead round per slot is S frames each way and a
            # round trip before any data, a per-call cost PACE's many small calls pay each time.
            for s in range(1, S):
                self.round[s] = 1
                self.v0[s] ^= 1         # round r uses (v0 + r) % 2: round 1 gets the lead's version
        self.pack, self.pack_retx = self.packer(), self.packer(wire.FLAG_RETX)
        self.frame_time = (PAYLOAD_BYTES + wire.AGG_OFFSET) * self.byte_time   # `leaves`, inlined
        self.native = native.dense_core(self)       # int32: on_batch's work in C (hosts/native.py)

    def is_open(self, s: int) -> bool:
        return self.round[s] < self.rounds[s]

    def block_id(self, s: int, r: int) -> int:
        return s if r == 0 else s + (r - 1) * self.S

    # -- sending ---------------------------------------------------------------------
    def send_round(self, s: int, now: float) -> None:
        """First packet of slot s's current round (the hot path: ~16,000 calls per worker and
        second at 20 Mb/s, so locals, and `leaves` inlined)."""
        r = self.round[s]
        if r:
            S = self.S
            j = s + (r - 1) * S
            nxt = j + S
            exp = self.exps[nxt]                         # (S zeros past the last block)
            if nxt >= self.nblocks:
                nxt = NEXT_NONE
            body = self.raw[j * DATA_BYTES:(j + 1) * DATA_BYTES] if self.raw else self.data_body(s, j)
        else:
            body = self.lead0 if s == 0 else self.zero_body
            j, nxt = s, s if s < self.nblocks else NEXT_NONE
            exp = self.exps[s] if s < self.nblocks else 0
        # EXERCISE slot-version BEGIN hint: round r of slot s alternates versions, starting from v0[s]: ver = (v0[s] + r) mod 2
        ver = (self.v0[s] + r) & 1
        # EXERCISE END
        self.packet[s] = (ver, s, exp, j, nxt, body)
        self.tx.send(self.pack(self.trees[s], self.epoch, ver, s, exp, j, nxt) + body)
        self.stats.packets_sent += 1
        t = self.depart = max(now, self.depart) + self.frame_time if self.frame_time else now
        self.sent_at[s] = t
        self.tries[s] = 0
        self.deadline[s] = t + self.rtt.rto

    def resend(self, s: int, now: float) -> None:
        *fields, body = self.packet[s]
        payload = self.pack_retx(self.trees[s], self.epoch, *fields) + body
        self.tx.send(payload)
        self.last_sent[s] = self.leaves(len(payload), now)
        self.stats.packets_sent += 1
        self.stats.retransmissions += 1

    # -- receiving -------------------------------------------------------------------
    def on_payload(self, p: bytes, now: float) -> bool:
        return self.on_batch(np.frombuffer(p, np.uint8)[None, :], np.array([len(p)]), now)

    def on_batch(self, rows: np.ndarray, lens: np.ndarray, now: float) -> bool:
        """Handle a receive batch; True if it accepted (progress-making) results.

        Within a batch at most one result per slot is accepted: the slot's next round is
        only sent once its result is in, so another copy in the same batch is a duplicate.
        An int32 run with the C core does the same in `native_batch`; this is the reference."""
        if self.native is not None:
            return self.native_batch(rows, lens, now)
        buf, stride = memoryview(rows).cast("B"), rows.shape[1]
        job, S, nb, rank = self.job, self.S, self.nblocks, self.rank
        rnd, rounds, v0, st = self.round, self.rounds, self.v0, self.stats
        sent_at, last_sent, tries, agreed = self.sent_at, self.last_sent, self.tries, self.agreed
        rtts, rows_in, blocks_in, advanced = [], [], [], []
        for i, size in enumerate(lens.tolist()):
            if size < PAYLOAD_BYTES:
                st.foreign_ignored += 1
                continue
            w = unpack(buf, i * stride)
            flags, s = (w[_FLAGS_W] >> _FLAGS_S) & _FLAGS_M, (w[_SLOT_W] >> _SLOT_S) & _SLOT_M
            if not flags & RESULT or (w[_JOB_W] >> _JOB_S) & _JOB_M != job or s >= S:
                st.foreign_ignored += 1
                continue
            r = rnd[s]
            if (r >= rounds[s] or (w[_VER_W] >> _VER_S) & _VER_M != (v0[s] + r) & 1
                    or (w[_BLOCK_W] >> _BLOCK_S) & _BLOCK_M != (s if r == 0 else s + (r - 1) * S)):
                st.duplicates_ignored += 1
                continue
            if not flags & RETX:                        # hosts/slots.py sample_rtt's rule
                rtts.append(now - sent_at[s])
            elif (w[_WORKER_W] >> _WORKER_S) & _WORKER_M == rank and tries[s] == 1:
                rtts.append(now - last_sent[s])
            if r:
                rows_in.append(i)
                blocks_in.append(s + (r - 1) * S)
            elif s == 0:
                check_lead(lanes(rows[i, :PAYLOAD_BYTES].tobytes()), n=self.n, rank=rank,
                           length=self.length, window=S, dtype=self.dtype)
            rnd[s] = r + 1
            agreed[s] = (w[_EXP_W] >> _EXP_S) & _EXP_M
            advanced.append(s)
        if not advanced:
            return False
        if rtts:
            self.rtt.sample_many(rtts, now)
        if rows_in:
            self.sums[blocks_in] = lanes_of(rows[rows_in])
            self.done += len(rows_in)
            if self.on_progress is not None:
                self.on_progress(self.done, nb)
        st.results_accepted += len(advanced)
        if self.parked:
            self.unpark(now)
        for s in advanced:
            if rnd[s] < rounds[s]:
                self.send_round(s, now)
            else:
                self.remaining -= 1
        return True

    def native_batch(self, rows: np.ndarray, lens: np.ndarray, now: float) -> bool:
        """on_batch with the accept loop and the data rounds' sends in C (hosts/fastagent.c),
        the rest as on_batch does it, in the same order."""
        advanced, rtts, rows_in, lead, foreign, dups = self.native.accept(rows, lens, now)
        st = self.stats
        st.foreign_ignored += foreign
        st.duplicates_ignored += dups
        if lead >= 0:
            check_lead(lanes(rows[lead, :PAYLOAD_BYTES].tobytes()), n=self.n, rank=self.rank,
                       length=self.length, window=self.S, dtype=self.dtype)
        if not advanced:
            return False
        if rtts:
            self.rtt.sample_many(rtts, now)
        if rows_in:
            self.done += rows_in
            if self.on_progress is not None:
                self.on_progress(self.done, self.nblocks)
        st.results_accepted += len(advanced)
        if self.parked:
            self.unpark(now)
        sent, finished = self.native.send_rounds(advanced, now)
        st.packets_sent += sent
        self.remaining -= finished
        return True

    def timeout_message(self, idle: float) -> str:
        return timeout_message(self, idle)
