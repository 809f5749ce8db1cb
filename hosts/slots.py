"""What every allreduce agent does per slot: blocks, versions, timers, control, the loop.

Why a shared base: the dense agent (hosts/agent.py) and the sparse agent
(hosts/sparse_agent.py) cut the array the same way, walk S slots, keep one timer per
slot with the same RTO and backoff (hosts/rto.py), sample latencies by the same rule,
follow the controller's epoch file the same way and assemble the result alike; they
differ only in what a slot sends next and which results it accepts. SlotRun holds the
common part; a subclass implements

    send_round(s, now)   first packet of slot s's current round (and arm its timer)
    resend(s, now)       the slot's retransmission
    on_payload(p, now)   handle one received payload; True if it made progress
    is_open(s)           slot s still has rounds to go
    timeout_message(idle)

and may replace `start(now)` (every slot's first round) and `on_batch(rows, lens, now)`
(a whole receive batch; by default on_payload for each) with vectorised versions, as the
dense agent does. The loop receives whole batches (hosts/transport.py `batches`).

Timers: one deadline per slot (`deadline`, inf when none): a slot has at most one timer,
arming replaces it, and the loop's next wake-up is their minimum. Per-slot state lives in
Python lists, not numpy arrays: it is read and written one slot at a time on the hot path,
where a list is several times faster.

Versions: round 0 of slot s (the lead round, on the dense pipeline for both agents)
uses version v0[s]; v0 is kept per transport and job across calls (see hosts/agent.py)
with `version_store`.
"""

from __future__ import annotations

import time
import weakref

import numpy as np

from agglab.ground import epoch_file, links, wire
from agglab.ground.runspec import DEFAULT_WINDOW
from agglab.hosts import quantization as qz
from agglab.hosts.consistency import DTYPES, lead_lanes
from agglab.hosts.codec import BE, EXP, FLAGS, JOB, PAYLOAD_BYTES, SLOT, WORKER, unpack
from agglab.hosts.diagnostics import AllreduceTimeout, NetworkPartitionError
from agglab.hosts.protocol import HeaderPacker
from agglab.hosts.rto import RtoEstimator, backoff, queue_seconds
from agglab.hosts.transport import batches

K = wire.K
INF = float("inf")
# the agg_h fields a packet varies, in the order the agents' compiled packers take them
PACKET_FIELDS = ("tree", "epoch", "ver", "slot", "exp", "block", "next_block")
CONTROL_POLL = 0.005
# ... for a job of at most CONTROL_POLL_WORKERS workers; a larger job's workers poll less
# often, so that all of them together read the controller's file no more often than that
# many would. Why: each poll is a wake-up and a file read, ~0.8% of a core per worker at
# 5 ms (measured on the 2-core machine), so 128 workers polled away about one core, and
# the emulator's CPU is what caps a faithful link rate. A reroute then reaches a worker of
# 128 within 40 ms instead of 5, still far inside the retransmission timer's range; never
# later than CONTROL_POLL_MAX (a job of 1,024: 50 ms, not 320).
CONTROL_POLL_WORKERS = 16
CONTROL_POLL_MAX = 0.05


def control_poll(workers: int) -> float:
    """Seconds between a worker's polls of the controller's epoch file, in a job of `workers`."""
    return min(CONTROL_POLL_MAX, CONTROL_POLL * max(1.0, workers / CONTROL_POLL_WORKERS))
# Interrupt coalescing, as a NIC does it: on a link of known rate, after a batch of fewer
# than COALESCE_BATCH results the agent waits before it looks again, while its own link is
# still busy with frames it queued (at most COALESCE_MAX and that backlog, from the
# departure clock of `leaves`). Why: each wake-up costs ~50 us of system calls and loop
# bookkeeping, as much as a dozen results; at 20 Mb/s results arrive every 126 us, so an
# agent woken per result spent most of its CPU waking up. While the backlog lasts the wait
# cannot idle the link; with nothing queued (a sparse column's last rounds, a lead round)
# the agent answers at once, so round trips do not grow. Unshaped links never wait.
COALESCE_BATCH = 16
COALESCE_MAX = 0.001
# ... or COALESCE_FRAMES full frames' time on the host's link where that is longer: at 1 Mb/s a
# result comes every 2.9 ms, and a 1 ms pause gathered none, only adding a wake-up per result
# (128 agents at 1 Mb/s spent ~100 us of CPU a frame); the backlog bound still keeps the link busy.
COALESCE_FRAMES = 4
# transport -> {job: per-slot version of the next round 0}
LEAD_VERSIONS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def check_call(array, rank: int, workers: int, window: int | None, default: int = DEFAULT_WINDOW):
    """Argument checks shared by the dense and the sparse agent: (array, window)."""
    arr = np.asarray(array)
    if arr.dtype not in DTYPES:
        raise TypeError(f"allreduce supports {[str(d) for d in DTYPES]}, got {arr.dtype}")
    if not 1 <= workers <= wire.MAX_RANKS or not 0 <= rank < workers:
        raise ValueError(f"need 1 <= workers <= {wire.MAX_RANKS} and 0 <= rank < workers, "
                         f"got workers={workers} rank={rank}")
    window = default if window is None else window
    if not 1 <= window <= wire.SLOTS:
        raise ValueError(f"window {window} outside 1..{wire.SLOTS} (AGG_SLOTS)")
    return arr, window


def version_store(registry: "weakref.WeakKeyDictionary", transport) -> dict:
    """{job: per-slot versions} kept for `transport` in `registry` (a fresh dict if the
    transport cannot be weakly referenced: then nothing outlives the call)."""
    try:
        return registry.setdefault(transport, {})
    except TypeError:
        return {}


def slot_versions(store: dict, job: int, S: int) -> list[int]:
    return store.setdefault(job, np.zeros(wire.SLOTS, np.uint8))[:S].tolist()


def save_versions(store: dict, job: int, versions) -> None:
    state = store.setdefault(job, np.zeros(wire.SLOTS, np.uint8))
    state[:len(versions)] = versions


class SlotRun:
    """State of one allreduce; `run()` is the single-threaded event loop."""

    def __init__(self, arr, transport, rank, n, job, tree, epoch, window, timeout, give_up,
                 tree_of_slot, control, on_progress, stats_type, link_mbps=None):
        self.shape, self.dtype, self.rank, self.n = arr.shape, arr.dtype, rank, n
        self.control_poll = control_poll(n)
        self.tx = batches(transport)
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
            self.ftable = np.array([0.0] + [qz.scale(b - wire.EXP_BIAS, n) for b in range(1, 256)])
            self.limit = qz.INT32_MAX // n
            self.used_exp = np.zeros(nb, dtype=np.uint8)
            self.ints = None                    # (int32 only: the array's K-blocks, rows)
        else:
            self.ints = padded.reshape(nb, K)   # converted to the wire's byte order per block sent
            self.exps = [0] * (nb + S)          # biased exponent per block (int32: 0), S zeros after
        self.sums = np.zeros((nb, K), dtype=np.int32)
        self.agreed = [0] * S                   # agreed biased exponent for the next round
        self.packet: list = [None] * S          # (header fields, body) per slot, for retransmission
        self.sent_at, self.last_sent = [0.0] * S, [0.0] * S
        self.tries = [0] * S
        self.deadline = [INF] * S               # each slot's timer (INF: none)
        self.parked: list[int] = []             # slots whose timer waits for a first result
        self.hold = False                       # the controller is rerouting: no resends until it is done
        self.rtt = RtoEstimator(timeout, ceiling=give_up / 3)   # resend well before giving up
        self.ready = None                       # called by run() before its first packet (the start gate)
        # the host's own link: seconds per byte (0: not known, so no queue is modelled). A
        # transport that paces (UdpTransport.pace) sends a little under the link rate
        # (ground/links.py): the departure clock runs at the pacer's rate, or timers would
        # start ever earlier than sends
        pace = getattr(transport, "pace", None)
        if pace is not None:
            pace(link_mbps)                     # None: off (a transport reused without a rate)
        self.link_mbps = link_mbps or 0.0
        if not link_mbps:
            self.byte_time = 0.0
        else:
            self.byte_time = links.pacing(link_mbps)[0] if pace is not None else 8 / (link_mbps * 1e6)
        self.depart = 0.0                       # when the last frame we sent leaves our link
        self.coalesce_max = max(COALESCE_MAX, COALESCE_FRAMES * wire.FRAME_BYTES * self.byte_time)
        self.stats = stats_type(blocks=nb, slots=S)
        self.trees = self.parse_trees(tree_of_slot) if tree_of_slot else [tree] * S
        self.tree_mbps: dict = {}               # tree id -> its slowest link's Mb/s (path_rates)
        self.versions = version_store(LEAD_VERSIONS, transport)
        self.v0 = slot_versions(self.versions, job, S)
        self.rounds = [1] * S                   # rounds per slot on the v0 alternation (sparse: the lead)
        self.zero_body = bytes(wire.DATA_BYTES)
        self.lead0 = lead_lanes(length=self.length, window=S, dtype=arr.dtype).astype(BE).tobytes()

    def packer(self, flags: int = 0):
        """A compiled packer of this run's headers with `flags`: pack(*PACKET_FIELDS) -> agg_h.
        A slot's packet is kept as (ver, slot, exp, block, next_block, body) for resends."""
        return HeaderPacker(job=self.job, worker=self.rank, flags=flags).compile(*PACKET_FIELDS)

    def path_rates(self, tree_mbps) -> None:
        """Floor the timers at the queues a full window makes at each tree's slowest link
        (`tree_mbps`: tree id -> that link's Mb/s, from the controller's epoch file;
        RtoEstimator.set_floor says why). Each of a tree's slots queues one frame there on
        the way up and its result one on the way down: a round trip can wait for both.

        And at the host's own link, which every tree crosses: the whole window's results
        queue on its way down (the way up is the sender's own queue, timed by `leaves`).
        Counting only a tree's slots there made a 16-slot window on 4 RAT trees wait 0.27 s
        for results that took 0.54 s to arrive at 0.075 Mb/s: at 128 workers with random
        sparse blocks every non-participant probed every round, each probe answered with a
        result on the same link, and the runs stalled."""
        self.tree_mbps = tree_mbps or self.tree_mbps
        queue = queue_seconds(self.S, self.link_mbps) if self.link_mbps else 0.0
        if not self.tree_mbps and not queue:
            return
        for t in set(self.trees):
            mbps = self.tree_mbps.get(str(t))
            if mbps:
                queue = max(queue, queue_seconds(2 * self.trees.count(t), mbps))
        self.rtt.set_floor(queue)

    def parse_trees(self, tree_of_slot) -> list[int]:
        trees = [int(t) for t in tree_of_slot]
        if len(trees) < self.S or not all(0 <= t < 256 for t in trees[:self.S]):
            raise ValueError(f"tree_of_slot needs {self.S} tree ids in 0..255, got {tree_of_slot!r}")
        return trees[:self.S]

    # -- subclass interface --------------------------------------------------------------
    def send_round(self, s: int, now: float) -> None:
        raise NotImplementedError

    def resend(self, s: int, now: float) -> None:
        raise NotImplementedError

    def on_payload(self, p: bytes, now: float) -> bool:
        raise NotImplementedError

    def is_open(self, s: int) -> bool:
        raise NotImplementedError

    def timeout_message(self, idle: float) -> str:
        raise NotImplementedError

    def before_expiry(self, now: float) -> None:
        """Hook run before due timers fire (the sparse agent drains results first)."""

    def start(self, now: float) -> None:
        """Every slot's first round."""
        for s in range(self.S):
            self.send_round(s, now)

    def on_batch(self, rows: np.ndarray, lens: np.ndarray, now: float) -> bool:
        """Handle a receive batch (payload i is rows[i, :lens[i]]); True if any made progress."""
        progress = False
        for row, size in zip(rows, lens):
            progress |= self.on_payload(row[:size].tobytes(), now)
        return progress

    def drain(self, now: float) -> None:
        """Handle every payload waiting now."""
        got = self.tx.recv_batch(0.0)
        while got is not None:
            self.on_batch(*got, now)
            got = self.tx.recv_batch(0.0) if self.remaining else None

    # -- sending and timers ----------------------------------------------------------------
    def data_body(self, s: int, j: int) -> bytes:
        """Block j's payload at slot s's agreed exponent (int32: the raw bytes)."""
        if not self.is_float:
            return self.ints[j].astype(BE).tobytes()
        e = self.agreed[s]
        self.used_exp[j] = e
        if e == 0:
            return self.zero_body               # every participant's block is all zero
        q = np.rint(self.blocks[j] * self.ftable[e])
        np.clip(q, -self.limit, self.limit, out=q)
        return q.astype(BE).tobytes()

    def leaves(self, payload_bytes: int, now: float) -> float:
        """When a payload sent now leaves this host's link (its frame's last bit), on the
        host's model of its own queue: frames go out back to back at the link rate.

        Why: a window of S slots is sent as one burst, and on a slow link its last frame
        waits S frame times in our own queue (128 x 0.5 ms at 5 Mb/s) before the network
        sees it. Timing it from the send call makes the first results' short round trips
        arm every other slot's timer far too early: the whole window was resent spuriously,
        behind itself. Timers and round-trip samples therefore start when the frame leaves,
        as they would on a NIC with a short queue; with the link rate unknown that is now."""
        if not self.byte_time:
            return now
        self.depart = max(now, self.depart) + (payload_bytes + wire.AGG_OFFSET) * self.byte_time
        return self.depart

    def arm(self, s: int, at: float) -> None:
        """A new round of slot s, sent at `at`: fresh tries, the timer one RTO later."""
        self.tries[s] = 0
        self.deadline[s] = at + self.rtt.rto

    def expire(self, now: float) -> None:
        deadline = self.deadline
        if not min(deadline) <= now:
            return
        self.before_expiry(now)
        for s in [s for s, at in enumerate(deadline) if at <= now]:
            if not self.is_open(s):
                deadline[s] = INF               # a timer left on a finished slot
                continue
            if s and not self.stats.results_accepted:
                deadline[s] = INF               # nothing heard yet: slot 0 alone probes
                self.parked.append(s)
                continue
            if self.hold:                       # the old epoch is frozen: a resend would only load the
                deadline[s] = now + self.rtt.rto         # switches; the new epoch resends
                continue
            if self.stats.results_accepted:     # results flow, yet this one is late: back off
                self.rtt.timed_out(now)         # (hosts/rto.py; a first result's probes do not)
            # EXERCISE retransmit-timer BEGIN hint: the slot's timer fired and no result came: count the try, resend(s, now) and set the slot's deadline to backoff(self.rtt.rto, self.tries[s]) after self.last_sent[s] (when the resend leaves)
            self.tries[s] += 1
            self.resend(s, now)
            deadline[s] = self.last_sent[s] + backoff(self.rtt.rto, self.tries[s])
            # EXERCISE END

    def poll_control(self, now: float) -> bool:
        """Apply a new epoch / tree_of_slot from the controller; True if anything changed."""
        msg = self.control()
        if not msg:
            return False
        if msg.get("status") == epoch_file.PARTITIONED:
            raise NetworkPartitionError(msg.get("reason") or "the controller reports the workers are partitioned")
        if msg.get("status") == epoch_file.REROUTING:
            self.hold = True               # resends wait for the new epoch (which resends everything)
            return True                    # the controller is alive and working: not a stall
        self.hold = False
        epoch = int(msg.get("epoch", self.epoch))
        trees = self.parse_trees(msg["tree_of_slot"]) if msg.get("tree_of_slot") else self.trees
        if epoch == self.epoch and trees == self.trees:
            return False
        wire.pack_agg(epoch=epoch)                 # range check
        self.epoch, self.trees = epoch, trees
        self.rtt.reset_backoff()                   # a new path: the old one's timeouts say nothing
        self.path_rates(msg.get("tree_mbps"))
        self.stats.epoch_changes += 1
        for s in range(self.S):                    # rebuild and resend everything outstanding
            if self.is_open(s):
                self.resend(s, now)
                self.sent_at[s] = self.last_sent[s]
                self.arm(s, self.sent_at[s])
                self.tries[s] = 1
        return True

    # -- receiving -------------------------------------------------------------------------
    def result_words(self, p: bytes):
        """The header words of a result of this job for one of our slots, else None
        (counted as foreign)."""
        if len(p) >= PAYLOAD_BYTES:
            w = unpack(p)
            if FLAGS(w) & wire.FLAG_RESULT and JOB(w) == self.job and SLOT(w) < self.S:
                return w
        self.stats.foreign_ignored += 1
        return None

    def sample_rtt(self, s: int, w, now: float) -> None:
        """hosts/rto.py's rule: a result completed by first transmissions is timed from
        our first send; one completed by our own single retransmission from that."""
        if not FLAGS(w) & wire.FLAG_RETX:
            self.rtt.sample(now - self.sent_at[s], now)
        elif WORKER(w) == self.rank and self.tries[s] == 1:
            self.rtt.sample(now - self.last_sent[s], now)

    def accepted(self, s: int, w, now: float) -> None:
        """Bookkeeping of an accepted result: its exponent is agreed for the slot's next
        round, and the first result re-arms the slots parked until something was heard."""
        self.agreed[s] = EXP(w)
        self.stats.results_accepted += 1
        if self.parked:
            self.unpark(now)

    def unpark(self, now: float) -> None:
        """The first result: the slots parked until something was heard get their timers."""
        for s in self.parked:
            self.deadline[s] = max(now, self.sent_at[s]) + self.rtt.rto
        self.parked.clear()

    # -- the loop --------------------------------------------------------------------------
    def run(self) -> np.ndarray:
        if self.ready is not None:              # the call's state is built: the start gate
            self.ready()
        start = last = time.monotonic()
        self.remaining = self.S
        try:
            self.start(start)
            recv, wait, poll_at = self.tx.recv_batch, 0.0, start
            while self.remaining:
                got = recv(wait)
                while got is not None:          # drain what is queued before any timer fires:
                    now = time.monotonic()      # after a stall the results are usually there
                    self.stats.batches += 1
                    if self.on_batch(*got, now):
                        last = now
                    if len(got[0]) < COALESCE_BATCH and self.remaining and self.depart > now:
                        self.tx.flush()         # what we answered leaves first; the pacer may
                        held = self.tx.held_back()       # want to send more before we look again
                        pause = min(self.coalesce_max, self.depart - now)
                        time.sleep(pause if held is None else min(pause, held))
                    got = recv(0.0) if self.remaining else None
                now = time.monotonic()
                if self.control is not None and now >= poll_at:
                    poll_at = now + self.control_poll
                    if self.poll_control(now):
                        last = now                 # a new tree gets a full give_up period
                self.expire(now)
                if now - last > self.give_up and self.remaining:
                    raise AllreduceTimeout(self.timeout_message(now - last))
                wake = min(last + self.give_up, min(self.deadline))
                if self.control is not None and poll_at < wake:
                    wake = poll_at
                wait = max(0.0, wake - now)
        except BaseException:
            self.versions.pop(self.job, None)   # switch state unknown now (see hosts/agent.py)
            raise
        finally:
            self.stats.seconds = time.monotonic() - start
            self.stats.srtt = self.rtt.srtt
            self.stats.rto_backoffs = self.rtt.backoffs
            self.tx.flush()                            # what the last results made us send leaves now
        save_versions(self.versions, self.job, [(v + r) & 1 for v, r in zip(self.v0, self.rounds)])
        if self.is_float:
            flat = qz.dequantize_blocks(self.sums, self.used_exp, self.n).reshape(-1)
        else:
            flat = self.sums.reshape(-1)
        return flat[:self.length].astype(self.dtype, copy=False).reshape(self.shape)
