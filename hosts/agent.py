"""The SwitchML worker: `allreduce` an array through an aggregating switch.

Protocol (design.md "Host agent"): the array is cut into blocks of K values
(last one zero-padded).  S = min(window, blocks) slots are used, each walking
its own column of blocks: round 0 of slot s is a LEAD round (zero values, the
exponent of the slot's first block; on slot 0 also the consistency lanes of
hosts/consistency.py), data block j travels on slot j % S in round 1 + j // S.
Each packet carries the exponent of the sender's next block on that slot, so
the result's max exponent is the scale every worker uses for the next round.
int32 arrays go raw (exact wrap-around sum, exp 0).

Versions: round r of slot s uses version (v0[s] + r) % 2.  v0 is 0 on a fresh
switch, which gives design.md's `round % 2`; later calls on the same transport
and job continue each slot's alternation (harmless on reset registers), because the switch
still holds the last round's completed version and would answer a new packet
of that version with the stale result.  After an error the switch state is
unknown: reset the registers or move to a new epoch.

Trees and epochs (design.md "Aggregation trees"): slot s travels on tree
tree_of_slot[s].  `control()` is polled every CONTROL_POLL seconds; when it
returns a new epoch (and/or tree_of_slot) every outstanding packet is rebuilt
with it and retransmitted at once.  Results are accepted whatever their epoch
or tree (slot numbers are unique within a job).

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

import heapq
import time
import weakref

import numpy as np

from ground import wire
from hosts import quantization as qz
from hosts.consistency import (DTYPES, ConsistencyError, DtypeMismatchError,  # noqa: F401 (API)
                               LengthMismatchError, WindowMismatchError,
                               WorkerCountMismatchError, check_lead, lead_lanes)
from hosts.diagnostics import AllreduceStats, AllreduceTimeout, NetworkPartitionError, timeout_message
from hosts.protocol import LAYOUT, HeaderPacker
from hosts.rto import MAX_RTO, RtoEstimator, backoff as rto_backoff
from hosts.transport import Transport, UdpTransport  # noqa: F401 (API)

K = wire.K
DEFAULT_WINDOW = 128
CONTROL_POLL = 0.005
_BE = np.dtype(">i4")
_H, _P = wire.AGG_HEADER_BYTES, wire.PAYLOAD_BYTES
_unpack = wire.AGG_STRUCT.unpack_from
# transport -> {job: per-slot version of the next round 0}
_VERSIONS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _field(name: str):
    word, shift, mask = LAYOUT[name]
    return lambda words: (words[word] >> shift) & mask


_FLAGS, _SLOT, _VER, _BLOCK, _EXP = map(_field, ("flags", "slot", "ver", "block", "exp"))
_JOB, _WORKER = map(_field, ("job", "worker"))


def check_call(array, rank: int, workers: int, window: int | None):
    """Argument checks shared by the dense and the sparse agent: (array, window)."""
    arr = np.asarray(array)
    if arr.dtype not in DTYPES:
        raise TypeError(f"allreduce supports {[str(d) for d in DTYPES]}, got {arr.dtype}")
    if not 1 <= workers <= wire.MAX_WORKERS or not 0 <= rank < workers:
        raise ValueError(f"need 1 <= workers <= {wire.MAX_WORKERS} and 0 <= rank < workers, "
                         f"got workers={workers} rank={rank}")
    window = DEFAULT_WINDOW if window is None else window
    if not 1 <= window <= wire.SLOTS:
        raise ValueError(f"window {window} outside 1..{wire.SLOTS} (AGG_SLOTS)")
    return arr, window


def allreduce(array, *, transport: Transport, rank: int, workers: int, job: int = 0,
              tree: int = 0, epoch: int = 0, window: int | None = None,
              timeout: float = 0.02, give_up: float = 10.0, return_stats: bool = False,
              tree_of_slot=None, control=None, on_progress=None, sparse: bool = False,
              block_size: int | None = None, lookahead: int | None = None, **sparse_options):
    """Sum `array` (float32 or int32, any shape/length) over `workers` agents via the switch.

    Returns an array of the same shape and dtype, or (array, AllreduceStats) with
    return_stats=True.  `timeout` is the initial retransmission timeout,
    `give_up` the seconds without any progress before AllreduceTimeout.
    `tree_of_slot` (one tree id per slot, overrides `tree`), `control` (callable
    returning None or {"epoch": e, "tree_of_slot": [...]} on a reroute) and
    `on_progress(done_blocks, total_blocks)` connect the agent to the controller.
    Raises a ConsistencyError subclass (LengthMismatchError, DtypeMismatchError,
    WindowMismatchError, WorkerCountMismatchError) when the workers disagree.
    `sparse=True` runs the block-sparse pipeline instead (hosts/sparse_agent.py; only
    there do `block_size`, `lookahead` and `sparse_options` apply; stats gain `blocks_sent`).
    """
    if sparse:
        from hosts import sparse_agent

        extra = {k: v for k, v in (("block_size", block_size), ("lookahead", lookahead))
                 if v is not None}
        return sparse_agent.allreduce(
            array, transport=transport, rank=rank, workers=workers, job=job, tree=tree,
            epoch=epoch, window=window, timeout=timeout, give_up=give_up,
            return_stats=return_stats, tree_of_slot=tree_of_slot, control=control,
            on_progress=on_progress, **extra, **sparse_options)
    if block_size is not None or lookahead is not None or sparse_options:
        raise TypeError(f"block_size, lookahead and {sorted(sparse_options)} apply to sparse=True only")
    arr, window = check_call(array, rank, workers, window)
    wire.pack_agg(job=job, tree=tree, epoch=epoch, worker=rank)   # range check of the fields
    run = _Run(arr, transport, rank, workers, job, tree, epoch, window, timeout, give_up,
               tree_of_slot, control, on_progress)
    out = run.run()
    return (out, run.stats) if return_stats else out


class _Run:
    """State of one allreduce; `run()` is the single-threaded event loop."""

    def __init__(self, arr, transport, rank, n, job, tree, epoch, window, timeout, give_up,
                 tree_of_slot, control, on_progress):
        self.shape, self.dtype, self.tx, self.rank, self.n = arr.shape, arr.dtype, transport, rank, n
        self.job, self.epoch, self.give_up = job, epoch, give_up
        self.control, self.on_progress, self.done = control, on_progress, 0
        self.length = arr.size
        self.nblocks = nb = -(-self.length // K)
        self.S = S = min(window, max(nb, 1))
        padded = np.zeros(nb * K, dtype=arr.dtype)
        padded[:self.length] = arr.reshape(-1)
        self.is_float = arr.dtype == np.float32
        if self.is_float:
            self.blocks = padded.reshape(nb, K).astype(np.float64)
            self.exps = qz.biased_exponents(self.blocks).tolist() + [0] * S
            self.ftable = [0.0] + [qz.scale(b - wire.EXP_BIAS, n) for b in range(1, 256)]
            self.limit = qz.INT32_MAX // n
            self.used_exp = np.zeros(nb, dtype=np.uint8)
        else:
            self.raw = padded.astype(_BE).tobytes()
            self.exps = [0] * (nb + S)
        self.sums = np.zeros((nb, K), dtype=np.int32)
        self.rounds = [1 + len(range(s, nb, S)) for s in range(S)]
        self.round = [0] * S
        self.agreed = [0] * S                   # agreed biased exponent for the next round
        self.packet: list = [None] * S          # (header fields, body) per slot, for retransmission
        self.sent_at, self.last_sent = [0.0] * S, [0.0] * S
        self.tries, self.seq = [0] * S, [0] * S
        self.timers: list[tuple[float, int, int]] = []
        self.parked: list[int] = []             # slots whose timer waits for a first result
        self.rtt = RtoEstimator(timeout)
        self.stats = AllreduceStats(blocks=nb, slots=S)
        self.trees = self._trees(tree_of_slot) if tree_of_slot else [tree] * S
        self.hdr = HeaderPacker(job=job, worker=rank)
        self.retx_hdr = HeaderPacker(job=job, worker=rank, flags=wire.FLAG_RETX)
        try:
            versions = _VERSIONS.setdefault(transport, {})
        except TypeError:                       # transport not weak-referenceable
            versions = {}
        self.versions = versions
        self.v0 = versions.setdefault(job, np.zeros(wire.SLOTS, np.uint8))[:S].tolist()
        self.zero_body = bytes(wire.DATA_BYTES)
        self.lead0 = lead_lanes(length=self.length, window=S, dtype=arr.dtype).astype(_BE).tobytes()

    def _trees(self, tree_of_slot) -> list[int]:
        trees = [int(t) for t in tree_of_slot]
        if len(trees) < self.S or not all(0 <= t < 256 for t in trees[:self.S]):
            raise ValueError(f"tree_of_slot needs {self.S} tree ids in 0..255, got {tree_of_slot!r}")
        return trees[:self.S]

    # -- sending ---------------------------------------------------------------------
    def block_id(self, s: int, r: int) -> int:
        return s if r == 0 else s + (r - 1) * self.S

    def _send_round(self, s: int, now: float) -> None:
        r, S = self.round[s], self.S
        if r == 0:
            body = self.lead0 if s == 0 else self.zero_body
            j, nxt = s, s if s < self.nblocks else wire.NEXT_NONE
            exp = self.exps[s] if s < self.nblocks else 0
        else:
            j = s + (r - 1) * S
            nxt = j + S if j + S < self.nblocks else wire.NEXT_NONE
            exp = self.exps[j + S]
            if not self.is_float:
                body = self.raw[j * 4 * K:(j + 1) * 4 * K]
            elif self.agreed[s] == 0:
                body = self.zero_body           # every worker's block is all zero
            else:
                q = np.rint(self.blocks[j] * self.ftable[self.agreed[s]])
                np.clip(q, -self.limit, self.limit, out=q)
                body = q.astype(_BE).tobytes()
                self.used_exp[j] = self.agreed[s]
        fields = dict(ver=(self.v0[s] + r) & 1, slot=s, exp=exp, block=j, next_block=nxt)
        self.packet[s] = (fields, body)
        self.tx.send(self.hdr.pack(tree=self.trees[s], epoch=self.epoch, **fields) + body)
        self.stats.packets_sent += 1
        self.sent_at[s], self.tries[s] = now, 0
        self.seq[s] += 1
        heapq.heappush(self.timers, (now + self.rtt.rto, s, self.seq[s]))

    def _expire(self, now: float) -> None:
        timers = self.timers
        while timers and timers[0][0] <= now:
            _, s, seq = heapq.heappop(timers)
            if seq != self.seq[s] or self.round[s] >= self.rounds[s]:
                continue                        # stale timer
            if s and not self.stats.results_accepted:
                self.parked.append(s)           # nothing heard yet: slot 0 alone probes
                continue
            self.tries[s] += 1
            self._resend(s, now)
            backoff = rto_backoff(self.rtt.rto, self.tries[s])
            heapq.heappush(timers, (now + backoff, s, seq))

    def _resend(self, s: int, now: float) -> None:
        fields, body = self.packet[s]
        self.tx.send(self.retx_hdr.pack(tree=self.trees[s], epoch=self.epoch, **fields) + body)
        self.last_sent[s] = now
        self.stats.packets_sent += 1
        self.stats.retransmissions += 1

    def _poll_control(self, now: float) -> bool:
        """Apply a new epoch / tree_of_slot from the controller; True if anything changed."""
        msg = self.control()
        if not msg:
            return False
        if msg.get("status") == "partitioned":
            raise NetworkPartitionError(msg.get("reason") or "the controller reports the workers are partitioned")
        if msg.get("status") == "rerouting":
            return True                    # the controller is alive and working: not a stall
        epoch = int(msg.get("epoch", self.epoch))
        trees = self._trees(msg["tree_of_slot"]) if msg.get("tree_of_slot") else self.trees
        if epoch == self.epoch and trees == self.trees:
            return False
        wire.pack_agg(epoch=epoch)                 # range check
        self.epoch, self.trees = epoch, trees
        self.stats.epoch_changes += 1
        for s in range(self.S):                    # rebuild and resend everything outstanding
            if self.round[s] < self.rounds[s]:
                self._resend(s, now)
                self.sent_at[s], self.tries[s] = now, 1
                self.seq[s] += 1
                heapq.heappush(self.timers, (now + self.rtt.rto, s, self.seq[s]))
        return True

    # -- receiving -------------------------------------------------------------------
    def _on_payload(self, p: bytes, now: float) -> bool:
        """Handle one payload; True if it was an accepted (progress-making) result."""
        if len(p) < _P:
            self.stats.foreign_ignored += 1
            return False
        w = _unpack(p)
        if not _FLAGS(w) & wire.FLAG_RESULT or _JOB(w) != self.job:
            self.stats.foreign_ignored += 1
            return False
        s = _SLOT(w)
        if s >= self.S:
            self.stats.foreign_ignored += 1
            return False
        r = self.round[s]
        if (r >= self.rounds[s] or _VER(w) != (self.v0[s] + r) & 1
                or _BLOCK(w) != self.block_id(s, r)):
            self.stats.duplicates_ignored += 1
            return False
        if not _FLAGS(w) & wire.FLAG_RETX:              # completed by a first transmission:
            self.rtt.sample(now - self.sent_at[s], now)  # latency since our first send
        elif _WORKER(w) == self.rank and self.tries[s] == 1:
            self.rtt.sample(now - self.last_sent[s], now)  # answer to our one retransmission
        lanes = np.frombuffer(p, dtype=_BE, count=K, offset=_H)
        if r == 0:
            if s == 0:
                check_lead(lanes, n=self.n, rank=self.rank, length=self.length,
                           window=self.S, dtype=self.dtype)
        else:
            self.sums[s + (r - 1) * self.S] = lanes
            self.done += 1
            if self.on_progress is not None:
                self.on_progress(self.done, self.nblocks)
        self.agreed[s] = _EXP(w)
        self.round[s] = r + 1
        self.stats.results_accepted += 1
        for other in self.parked:               # first result: re-arm the parked slots
            heapq.heappush(self.timers, (now + self.rtt.rto, other, self.seq[other]))
        self.parked.clear()
        if r + 1 < self.rounds[s]:
            self._send_round(s, now)
        else:
            self.remaining -= 1
        return True

    # -- the loop --------------------------------------------------------------------
    def _timeout_message(self, idle: float) -> str:
        return timeout_message(self, idle)

    def run(self) -> np.ndarray:
        start = last = time.monotonic()
        self.remaining = self.S
        try:
            for s in range(self.S):
                self._send_round(s, start)
            recv, wait, poll_at = self.tx.recv, 0.0, start
            while self.remaining:
                p = recv(wait)
                while p is not None:            # drain what is queued before any timer fires:
                    now = time.monotonic()      # after a stall the results are usually there
                    if self._on_payload(p, now):
                        last = now
                    p = recv(0.0) if self.remaining else None
                now = time.monotonic()
                if self.control is not None and now >= poll_at:
                    poll_at = now + CONTROL_POLL
                    if self._poll_control(now):
                        last = now                 # a new tree gets a full give_up period
                self._expire(now)
                if now - last > self.give_up and self.remaining:
                    raise AllreduceTimeout(self._timeout_message(now - last))
                wake = last + self.give_up
                if self.timers and self.timers[0][0] < wake:
                    wake = self.timers[0][0]
                if self.control is not None and poll_at < wake:
                    wake = poll_at
                wait = max(0.0, wake - now)
        except BaseException:
            self.versions.pop(self.job, None)   # switch state unknown now (see module doc)
            raise
        finally:
            self.stats.seconds = time.monotonic() - start
            self.stats.srtt = self.rtt.srtt
        state = self.versions.setdefault(self.job, np.zeros(wire.SLOTS, np.uint8))
        state[:self.S] = [(v + r) & 1 for v, r in zip(self.v0, self.rounds)]
        if self.is_float:
            flat = qz.dequantize_blocks(self.sums, self.used_exp, self.n).reshape(-1)
        else:
            flat = self.sums.reshape(-1)
        return flat[:self.length].astype(self.dtype).reshape(self.shape)
