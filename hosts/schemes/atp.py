"""ATP-style allreduce on the hosts: workers send to their job's parameter server, the
switches aggregate best effort in a shared pool (softswitch/schemes/atp.py, p4src/include/atp.p4),
and the PS sums what fell back, deduplicates resends and returns every result.

Why a PS: ATP's switches keep no per-job memory, so a packet whose aggregator is held by
another job must still be summed somewhere; the PS (rank 0's host, colocated as in many
PS deployments) is where every packet of the job is addressed, aggregated or not.

Each packet: job, flags = ATP, block = seq ((call & 0xFF) << 24 | block index, so a late
packet of an earlier call never lands in this one), the set of ranks whose values it
carries (one bit each, 64 bits: next_block and the fields ATP leaves unused,
ground/wide_senders.py), K int32 values. A worker keeps `window` blocks
outstanding and resends a block whose result has not come back within its timeout. The PS
keeps per block disjoint pieces (set, sum): a new set that covers pieces it already has
contributes the difference (exact in int32 wrap-around arithmetic), a set it already
covers is a duplicate; switches only ever send on a rack's whole set, every remote rank's
set, or what a worker sent itself, so pieces never straddle (a straddling set waits until
other pieces make it usable). When a block's pieces cover every rank, the PS unicasts the
sum to every worker and answers any later packet of that block with it (a lost result).
int32 only: the difference of float sums would not be exact.

When the PS may stop answering: only a worker knows it still lacks a result (the result
and its resends may all be lost, or the worker starved of CPU, for any length of time), so
no quiet period at the PS is safe. Each worker, once it has every result, sends FIN (block
FIN_BLOCK of the call) and waits briefly for its acknowledgement; the PS keeps answering
until every worker's FIN (or a packet of its next call) has arrived, or until nothing came
for the workers' own give-up time (a worker still waiting would have given up by then).
FIN travels as a resend (RETX), which no switch aggregates (atp.p4 never claims for one).
"""

from __future__ import annotations

import atexit
import socket
import threading
import time

import numpy as np

from agglab.ground import atp_pool, fdwait, wide_senders, wire
from agglab.ground.schemes import SCHEMES
from agglab.hosts.atp_window import DelayWindow
from agglab.hosts.diagnostics import AllreduceTimeout
from agglab.hosts.protocol import decode, encode
from agglab.hosts.rto import RtoEstimator, backoff, queue_seconds

K = wire.K
FLAG_ATP = SCHEMES["atp"].flag_bits
RESULT = wire.FLAG_RESULT
RETX = wire.FLAG_RETX
SEQ_BITS = 24                     # block index bits of seq; the call's generation above them
RTO = 0.05                        # first retransmission timeout (s); then the agents' estimator (hosts/rto.py)
# A worker gives up only once `give_up` seconds passed without progress AND every block it still
# waits for was resent this often. Why: on a busy machine answers come late, the RTO backs off to
# its ceiling (give_up / 6), and a last block then had about six tries in give_up seconds. At 5%
# loss on each of the ~10 ports of a round trip a try fails with p = 1 - 0.95^10 = 0.4, so a
# stalled block gave up with the PS alive with p^6 = 1/244 (estimated, not measured); twelve
# tries: p^12 = 1/60,000. A dead PS is still told within about 2 x give_up.
GIVE_UP_TRIES = 12
FIN_BLOCK = (1 << SEQ_BITS) - 1   # block index of a worker's FIN: "I have every result of this call"
TO_ALL = wire.CONST["ATP_TO_ALL"]  # agg_h worker of the PS's one copy of a result (--atp-multicast)
FIN_TRIES = 6                     # FIN sends without acknowledgement before a worker returns anyway
BUFFER = 4 << 20
CALLS_READY = True                # allreduce calls comm.ready() once its endpoint and rows are built


def _socket(ip: str) -> socket.socket:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    for opt in (socket.SO_RCVBUF, socket.SO_SNDBUF):
        s.setsockopt(socket.SOL_SOCKET, opt, BUFFER)
    s.bind((ip, wire.UDP_PORT))
    s.setblocking(False)
    return s


def path_floor(window: int, workers: int, mbps: float) -> float:
    """The least retransmission timeout of a worker with `window` blocks out on a path whose
    slowest link runs at `mbps` (the controller's epoch file, `tree_mbps`), as the dense
    agents floor theirs (hosts/slots.py `path_rates`, RtoEstimator.set_floor says why).

    A block's round trip can queue behind its worker's whole window on the way up (the
    switches sum the other workers' copies on the way, so they do not add) and, on the way
    down, behind that window's results for every other worker: the PS unicasts each result
    workers - 1 times through its own link. window x workers frames in all, all counted at
    the slowest link's rate (the PS's link may be faster: the floor errs long, which costs
    only loss-recovery pace, never a storm). Measured before the floor: at 32 workers on
    0.1 Mb/s links a 16-block window's results took 13 s to leave the PS while the timers
    fired after 0.3 s, and every resend queued behind them."""
    return queue_seconds(window * workers, mbps)


def _blocks(array: np.ndarray) -> np.ndarray:
    if array.dtype != np.int32:
        raise TypeError(f"--algorithm atp sums int32 (the PS's differences must be exact), got {array.dtype}")
    n = -(-array.size // K)
    if n >= FIN_BLOCK:
        raise ValueError(f"--algorithm atp: {array.size} elements make {n} blocks, at most {FIN_BLOCK - 1}")
    rows = np.zeros(n * K, dtype=np.int32)
    rows[:array.size] = array.ravel()
    return rows.reshape(n, K)


def _again(answer: bytes | None) -> bytes | None:
    """A result sent again for a resend (the first was lost) says so (RETX): the worker's
    time to it includes loss recovery, not queueing (hosts/atp_window.py)."""
    if answer is None:
        return None
    hdr = wire.unpack_agg(answer)
    return wire.pack_agg(**{**hdr, "flags": hdr["flags"] | RETX}) + answer[wire.AGG_HEADER_BYTES:]


class Pieces:
    """One block at the PS: disjoint (set, sum) pieces; `add` returns True once they cover `full`.
    `resent`: some worker resent it (its result then says so, RETX: the time to it includes
    loss recovery, which the workers' window must not read as queueing)."""

    __slots__ = ("have", "pieces", "waiting", "resent")

    def __init__(self):
        self.have = 0
        self.resent = False
        self.pieces: list[tuple[int, np.ndarray]] = []
        self.waiting: list[tuple[int, np.ndarray]] = []

    def add(self, senders: int, values: np.ndarray) -> bool:
        """False when nothing new (a duplicate) or the set must wait; True when it added."""
        if not senders & ~self.have:
            return False                                   # every sender already counted
        inside = []
        for m, v in self.pieces:
            if m & senders == m:
                inside.append(v)
            elif m & senders:                              # straddles a piece: not usable yet
                self.waiting.append((senders, values.copy()))
                return False
        new = values.astype(np.int64)
        for v in inside:
            new -= v
        self.pieces.append((senders & ~self.have, new))
        self.have |= senders
        waiting, self.waiting = self.waiting, []
        for m, v in waiting:
            self.add(m, v)
        return True

    def total(self) -> np.ndarray:
        s = np.zeros(K, dtype=np.int64)
        for _, v in self.pieces:
            s += v
        return (s & 0xFFFFFFFF).astype(np.uint32).view(np.int32)       # int32 wrap-around


class AtpEndpoint:
    """One rank's socket across calls (a Communicator keeps it): rank 0 is the PS."""

    def __init__(self, local_ip: str, peers: list[str], rank: int, job: int, multicast: bool = False,
                 pool_slots: int | None = None):
        """multicast (--atp-multicast): the PS sends each result once, addressed to every worker
        (worker = TO_ALL), and its ToR replicates it (atp.p4 atp_aggregate_mcast); a result
        answering one worker's resend is still unicast. pool_slots (--atp-pool-slots): blocks
        are numbered with the seqs that hash into aggregators 0..pool_slots-1 (ground/atp_pool.py)."""
        self.sock = _socket(local_ip)
        self.peers, self.rank, self.job, self.multicast = peers, rank, job, multicast
        self.pool_slots = pool_slots or atp_pool.POOL
        self._back: dict[int, int] = {}                    # PS: this call's wire index -> block
        self.calls = 0
        self._linger: threading.Thread | None = None
        self._stop = threading.Event()
        self._answers: dict[int, bytes] = {}               # seq -> result payload (PS: the last call's)
        self._fins = 0                                     # PS: the ranks that have every result of the call
        self._early: list[bytes] = []                      # PS: the next call's packets its linger read
        # the PS keeps answering lost results after its last block; a worker process may end
        # with os._exit (the fork server runs atexit first), which would kill that thread
        atexit.register(self.close)

    # -- the worker side --------------------------------------------------------------
    def work(self, rows: np.ndarray, window: int, give_up: float, on_progress=None,
             path_mbps: float | None = None):
        """path_mbps: the slowest link on the worker's path to the PS and back (None: not
        shaped); the timers are floored at the queue the current window makes there."""
        gen = self.calls & 0xFF
        nb = len(rows)
        idx, back = atp_pool.seq_indices(self.job, gen, nb, self.pool_slots, SEQ_BITS)
        ps = (self.peers[0], wire.UDP_PORT)
        out = np.zeros_like(rows)
        done = np.zeros(nb, dtype=bool)
        deadline: dict[int, float] = {}
        tries: dict[int, int] = {}
        first_sent: dict[int, float] = {}
        rto = RtoEstimator(RTO, ceiling=give_up / 6)       # several resends before giving up (a lost block)
        cw = DelayWindow(window)                           # `window` is its maximum (hosts/atp_window.py)
        sent = resent = dups = 0
        next_b, finished, last_progress = 0, 0, time.monotonic()
        me = 1 << self.rank
        floored = 0                                        # the window size the floor was set for
        while finished < nb:
            if path_mbps and cw.size != floored:
                floored = cw.size
                rto.set_floor(path_floor(floored, len(self.peers), path_mbps))
            now = time.monotonic()
            while len(deadline) < cw.size and next_b < nb:
                self._send(int(idx[next_b]), gen, rows[next_b], me, 0, ps)
                deadline[next_b], tries[next_b], first_sent[next_b] = now + rto.rto, 0, now
                next_b, sent = next_b + 1, sent + 1
            wait = max(0.0, min(deadline.values()) - now) if deadline else 0.05
            readable = fdwait.readable([self.sock], min(wait, 0.05))
            if readable:
                for payload in self._drain():
                    hdr, vals = decode(payload)
                    if (not hdr["flags"] & RESULT or hdr["job"] != self.job
                            or hdr["block"] >> SEQ_BITS != gen):
                        continue
                    b = back.get(hdr["block"] & ((1 << SEQ_BITS) - 1), nb)
                    if b >= nb or done[b]:
                        dups += 1
                        continue
                    out[b], done[b] = vals, True
                    deadline.pop(b, None)
                    t = time.monotonic()
                    cw.on_result()
                    if not hdr["flags"] & RETX:            # no one's resend in it: queueing, not loss,
                        rto.sample(t - first_sent[b], t)   # and the first send's round trip even if we
                        cw.on_sample(first_sent[b], t)     # resent since (the PS answered before that)
                    elif tries[b] == 0:                    # Karn: only blocks sent once time the path
                        rto.sample(t - first_sent[b], t)
                    finished += 1
                    last_progress = time.monotonic()
                if on_progress is not None:
                    on_progress(finished, nb)
            now = time.monotonic()
            for b, t in list(deadline.items()):
                if t <= now:
                    cw.on_timeout()
                    rto.timed_out(now)                     # late: back off (hosts/rto.py); from the
                                                           # start, as a whole window resends here
                    tries[b] += 1
                    self._send(int(idx[b]), gen, rows[b], me, RETX, ps)
                    deadline[b] = now + backoff(rto.rto, tries[b])
                    resent += 1
            if now - last_progress > give_up and min((tries[b] for b in deadline), default=GIVE_UP_TRIES) >= GIVE_UP_TRIES:
                missing = np.flatnonzero(~done)
                raise AllreduceTimeout(f"rank {self.rank}: atp allreduce of job {self.job} made no progress "
                                       f"for {now - last_progress:.1f} s (each block resent at least "
                                       f"{GIVE_UP_TRIES} times); {len(missing)} blocks missing (first {missing[:5]}): "
                                       "is the PS (rank 0) running and routed?")
        self._finish(gen, me, ps, rto)
        self.calls += 1
        return out, {"packets_sent": sent + resent, "retransmissions": resent, "duplicates_ignored": dups,
                     "blocks": nb, "window_cuts": cw.cuts, "window_last": cw.size,
                     "window_base_ms": None if cw.base == float("inf") else round(cw.base * 1e3, 3),
                     "rto_floor_ms": round(rto.floor * 1e3, 3) if floored else None, "rtt_min": rto.least,
                     "rto_backoffs": rto.backoffs}

    def _finish(self, gen: int, me: int, ps, rto: RtoEstimator) -> bool:
        """FIN until the PS acknowledges it, at most FIN_TRIES sends: True when it did. The
        worker has its sums either way; an unacknowledged FIN only keeps the PS answering
        until its quiet give-up."""
        seq, zeros = gen << SEQ_BITS | FIN_BLOCK, np.zeros(K, dtype=np.int32)
        for tries in range(FIN_TRIES):
            self._send(FIN_BLOCK, gen, zeros, me, RETX, ps)
            until = time.monotonic() + backoff(rto.rto, tries)
            while (left := until - time.monotonic()) > 0:
                if not fdwait.readable([self.sock], left):
                    continue
                for payload in self._drain():
                    hdr, _ = decode(payload)
                    if hdr["flags"] & RESULT and hdr["job"] == self.job and hdr["block"] == seq:
                        return True
        return False

    # -- the parameter server (rank 0) ------------------------------------------------
    def serve(self, rows: np.ndarray, workers: int, give_up: float, on_progress=None):
        self._stop_linger()
        gen = self.calls & 0xFF
        self._fins = 0
        nb = len(rows)
        self._back = atp_pool.seq_indices(self.job, gen, nb, self.pool_slots, SEQ_BITS)[1]
        full = (1 << workers) - 1
        blocks = [Pieces() for _ in range(nb)]
        for b in range(nb):
            blocks[b].add(1, rows[b])                      # the PS's own values: rank 0's bit
        out = np.zeros_like(rows)
        done = np.zeros(nb, dtype=bool)
        finished = 0
        if workers == 1:
            out[:], done[:], finished = rows, True, nb
        answers: dict[int, bytes] = {}
        stats = {"packets_sent": 0, "retransmissions": 0, "duplicates_ignored": 0, "blocks": nb,
                 "ps_packets": 0, "ps_fallback_packets": 0, "ps_results_resent": 0}
        early, self._early = self._early, []
        for payload in early:                              # sent while the last call's linger listened
            finished += self._ps_packet(payload, gen, nb, full, blocks, out, done, answers, stats)
        last_progress = time.monotonic()
        while finished < nb:
            readable = fdwait.readable([self.sock], 0.05)
            if readable:
                for payload in self._drain():
                    finished += self._ps_packet(payload, gen, nb, full, blocks, out, done, answers, stats)
                last_progress = time.monotonic()
                if on_progress is not None:
                    on_progress(finished, nb)
            elif time.monotonic() - last_progress > give_up:
                missing = np.flatnonzero(~done)
                raise AllreduceTimeout(f"rank 0 (atp PS of job {self.job}): no packet for {give_up:g} s; "
                                       f"{len(missing)} blocks incomplete (first {missing[:5]})")
        self.calls += 1
        self._answers = answers
        self._linger = threading.Thread(target=self._keep_answering, args=(gen, full, give_up), daemon=False,
                                        name="atp-ps-linger")
        self._linger.start()
        return out, stats

    def _ps_packet(self, payload, gen, nb, full, blocks, out, done, answers, stats) -> int:
        hdr, vals = decode(payload)
        if hdr["flags"] & RESULT or hdr["job"] != self.job:
            return 0
        seq = hdr["block"]
        if seq & FIN_BLOCK == FIN_BLOCK:
            self._fin(hdr, gen)
            return 0
        stats["ps_packets"] += 1
        if seq >> SEQ_BITS != gen:
            self._answer(self._answers.get(seq), wide_senders.of_header(hdr))   # the previous call's straggler
            return 0
        b = self._back.get(seq & ((1 << SEQ_BITS) - 1), nb)
        if b >= nb:
            return 0
        senders = wide_senders.of_header(hdr)
        if senders & (senders - 1) == 0:
            stats["ps_fallback_packets"] += 1                 # one worker's own values: not aggregated
        if done[b]:
            stats["ps_results_resent"] += 1
            self._answer(_again(answers[seq]), senders)       # its result was lost: again
            return 0
        if hdr["flags"] & RETX:
            blocks[b].resent = True
        if not blocks[b].add(senders, vals):
            stats["duplicates_ignored"] += 1
            return 0
        if blocks[b].have & full != full:
            return 0
        out[b], done[b] = blocks[b].total(), True
        flags = FLAG_ATP | RESULT | (RETX if blocks[b].resent else 0)
        answers[seq] = encode({"job": self.job, "flags": flags, "block": seq, **wide_senders.fields(full)}, out[b])
        if self.multicast and len(self.peers) > 1:         # one copy; the PS's ToR replicates it
            self._sendto(encode({"job": self.job, "flags": flags, "block": seq, **wide_senders.fields(full),
                                 "worker": TO_ALL}, out[b]), (self.peers[1], wire.UDP_PORT))
            stats["packets_sent"] += 1
        else:
            self._answer(answers[seq], full)
            stats["packets_sent"] += bin(full).count("1") - 1
        blocks[b] = None
        return 1

    def _fin(self, hdr: dict, gen: int) -> None:
        """A worker's FIN: counted if it is this call's, acknowledged whichever call it ends."""
        if hdr["block"] >> SEQ_BITS == gen:
            self._fins |= wide_senders.of_header(hdr)
        senders = wide_senders.of_header(hdr)
        self._answer(encode({"job": self.job, "flags": FLAG_ATP | RESULT, "block": hdr["block"],
                             **wide_senders.fields(senders)}, np.zeros(K, dtype=np.int32)), senders)

    def _answer(self, payload: bytes | None, senders: int) -> None:
        if payload is None:
            return
        for r in range(1, len(self.peers)):
            if senders >> r & 1:
                self._sendto(payload, (self.peers[r], wire.UDP_PORT))

    def _keep_answering(self, gen: int, full: int, give_up: float) -> None:
        """After the PS's last result: answer lost results until every worker has said it has
        them all (FIN, or a packet of the next call, kept for it), or nothing came for
        give_up (a worker still waiting would have given up), or the next call begins."""
        workers, quiet_since = full & ~1, time.monotonic()
        while (not self._stop.is_set() and self._fins & workers != workers
               and time.monotonic() - quiet_since < give_up):
            readable = fdwait.readable([self.sock], 0.05)
            if readable:
                for payload in self._drain():
                    hdr, _ = decode(payload)
                    if hdr["flags"] & RESULT or hdr["job"] != self.job:
                        continue
                    if hdr["block"] & FIN_BLOCK == FIN_BLOCK:
                        self._fin(hdr, gen)
                    elif hdr["block"] >> SEQ_BITS == (gen + 1) & 0xFF:     # its senders finished this call
                        self._fins |= wide_senders.of_header(hdr)
                        self._early.append(payload)
                    else:
                        self._answer(_again(self._answers.get(hdr["block"])), wide_senders.of_header(hdr))
                quiet_since = time.monotonic()

    def _stop_linger(self) -> None:
        if self._linger is not None:
            self._stop.set()
            self._linger.join()
            self._stop.clear()
            self._linger = None

    # -- the socket -------------------------------------------------------------------
    def _send(self, b: int, gen: int, values: np.ndarray, senders: int, flags: int, dest) -> None:
        self._sendto(encode({"job": self.job, "flags": FLAG_ATP | flags, "worker": self.rank,
                             "block": gen << SEQ_BITS | b, **wide_senders.fields(senders)}, values), dest)

    def _sendto(self, payload: bytes, dest) -> None:
        try:
            self.sock.sendto(payload, dest)
        except (BlockingIOError, OSError):      # a full queue or a down link: loss, the timers recover
            pass

    def _drain(self):
        while True:
            try:
                yield self.sock.recv(2048)
            except (BlockingIOError, InterruptedError):
                return

    def close(self) -> None:
        """Wait until the PS may stop answering (every FIN, or quiet), then close the socket."""
        if self._linger is not None:
            self._linger.join()
            self._linger = None
        if self.sock.fileno() >= 0:
            self.sock.close()


def allreduce(comm, array):
    """The hosts' runner for `--algorithm atp` (hosts/schemes: RUNNERS)."""
    endpoint = getattr(comm, "_atp", None)
    if endpoint is None:
        endpoint = comm._atp = AtpEndpoint(comm.seat.local_ip, comm.plan.peers(), comm.rank, comm.spec.job,
                                           multicast=comm.spec.result_multicast,
                                           pool_slots=comm.spec.atp_pool_slots)
    array = np.asarray(array)
    rows = _blocks(array)
    comm.ready()                     # the start gate (hosts/communicator.py)
    started = time.monotonic()
    if comm.rank == 0:
        out, stats = endpoint.serve(rows, comm.workers, comm.spec.give_up, comm.block_progress)
    else:
        rates = comm.route().get("tree_mbps") or {}
        out, stats = endpoint.work(rows, comm.plan.window, comm.spec.give_up, comm.block_progress,
                                   path_mbps=min(rates.values(), default=None))
    stats["seconds"] = time.monotonic() - started
    return out.reshape(-1)[:array.size].reshape(array.shape), stats
