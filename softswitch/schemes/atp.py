"""ATP-style best-effort aggregation in one pool every job shares (p4src/include/atp.p4).

Why: the dense pipeline gives each job a disjoint slot range, so a switch's memory is
partitioned statically among tenants. ATP (NSDI'21) shares one pool of aggregators: a
packet of (job, seq) takes the aggregator at crc32(job, seq) % ATP_POOL if it is free or
already its own, and adds its values; if another (job, seq) holds it, the packet goes on
unaggregated toward the job's parameter server (an ordinary IPv4 route), which sums what
fell back. A sender set travels in the packet (one bit per rank, 64 bits: next_block and
the dense fields ATP leaves unused, ground/wide_senders.py), so partial
sums compose: the workers' ToR aggregates its rack (expect = the rack's ranks), the PS's
ToR the racks (expect = every remote rank), and the PS adds up sets.

Per aggregator: `atp_bitmap` (the senders in it; 0 = free), its owner (`atp_owner_job`,
`atp_owner_seq`), `atp_count`, `atp_retx` and the K lanes in `atp_values`. Ingress, for an ATP packet
whose job has an `atp_job` entry here (else it is only forwarded, ATP_STAT_PASS):
- a result (RESULT flag) coming back from the PS releases the aggregator if (job, seq)
  still holds it (left behind by a resend) and is forwarded;
- a free aggregator is claimed (not by a resend, RETX: its partners have moved on, so it
  would wait for senders that never come); one held by (job, seq) takes the senders it
  lacks; one held by another (job, seq), a sender set that overlaps the held one, or one
  with senders outside `expect`, sends the packet on unchanged;
- when the aggregator holds every sender of `expect`, its sum leaves toward the PS (the
  packet's own addresses, the IPv4 route) with the set in `next_block`, and the aggregator
  is released at once. A resend (RETX) added into the aggregator marks it (`atp_retx`) and
  the sum leaves flagged RETX whichever packet completed it: the workers time only answers
  no resend is in (Karn, hosts/schemes/atp.py); measured before this (2026-12-07, ninth
  session), a sum a partner's first send completed came back unmarked and the worker timed
  its own loss recovery from its first send, backing its RTO off.
Nothing here is exact on its own: the PS (hosts/schemes/atp.py) deduplicates and completes.
"""

from __future__ import annotations

import zlib

import numpy as np

from agglab.ground import wide_senders, wire
from agglab.ground.schemes import SCHEMES
from agglab.softswitch.aggregate import BLOCK_OFF, DATA_END, DATA_OFF, FLAGS_OFF, UDP_CSUM
from agglab.softswitch.forward import COPY
from agglab.softswitch.registers import CounterArray, RegisterArray
from agglab.softswitch.tables import KeySpec, Table

C = wire.CONST
K, POOL = wire.K, C["ATP_POOL"]
FLAG_ATP = SCHEMES["atp"].flag_bits
P4 = ("atp.p4", "Atp")             # the P4 control this one mirrors (p4src/include)
RESULT, RETX = wire.FLAG_RESULT, wire.FLAG_RETX
JOB_OFF = wire.AGG_OFFSET
(STAT_CLAIM, STAT_ADD, STAT_DONE, STAT_COLLIDE, STAT_OVERLAP, STAT_RELEASE, STAT_PASS, STAT_MCAST) = (
    C["ATP_STAT_CLAIM"], C["ATP_STAT_ADD"], C["ATP_STAT_DONE"], C["ATP_STAT_COLLIDE"], C["ATP_STAT_OVERLAP"],
    C["ATP_STAT_RELEASE"], C["ATP_STAT_PASS"], C["ATP_STAT_MCAST"])
TO_ALL = C["ATP_TO_ALL"]           # agg_h worker of a PS result for every worker (--atp-multicast)
WORKER_OFF = wire.AGG_OFFSET + 6      # agg_h.worker (headers.p4)
BE_I32 = np.dtype(">i4")
AGGREGATE, MCAST, PASS = "atp_aggregate", "atp_aggregate_mcast", "atp_pass"


def aggregator_of(job: int, seq: int) -> int:
    """atp.p4's index: hash(crc32, {job (8 bits), seq (32 bits)}) % ATP_POOL; BMv2's crc32
    is the standard CRC-32 (zlib's)."""
    # EXERCISE atp-hash BEGIN hint: zlib.crc32 over the job (one byte) followed by seq (4 bytes, big-endian: seq.to_bytes(4, "big")), modulo POOL, exactly as atp.p4's hash() over {job, seq}
    return zlib.crc32(bytes((job,)) + seq.to_bytes(4, "big")) % POOL
    # EXERCISE END


def make_state() -> tuple[dict[str, RegisterArray], CounterArray]:
    """atp.p4's registers and its atp_stats counter."""
    regs = [RegisterArray("atp_values", 32, POOL * K), RegisterArray("atp_bitmap", 64, POOL),
            RegisterArray("atp_owner_job", 8, POOL), RegisterArray("atp_owner_seq", 32, POOL),
            RegisterArray("atp_count", 8, POOL), RegisterArray("atp_retx", 8, POOL)]
    return {r.name: r for r in regs}, CounterArray("atp_stats", C["ATP_STATS_SIZE"])


def build(pipeline) -> "Atp":
    """atp.p4 on the pipeline: its registers, its atp_stats counter and atp_job table."""
    registers, stats = make_state()
    pipeline.register_arrays.update(registers)
    pipeline.counter_arrays[stats.name] = stats
    control = Atp(pipeline.register_arrays, stats, pipeline.forward)
    pipeline.tables[control.atp_job.name] = control.atp_job
    return control


class Atp:
    def __init__(self, registers: dict[str, RegisterArray], stats: CounterArray, forward):
        """forward: the pipeline's Forward (forward.p4), whose ipv4_lpm carries every ATP
        packet that leaves, aggregated or not, toward its destination (the PS or a worker)."""
        self.atp_job = Table("atp_job", [KeySpec("hdr.agg.job", "exact", 8)],
                             {AGGREGATE: [("expect", 64)], MCAST: [("expect", 64), ("mgrp", 16)], PASS: []},
                             default=PASS, size=256)
        self.values = registers["atp_values"].data
        self.bitmap = registers["atp_bitmap"].data
        self.owner_job = registers["atp_owner_job"].data
        self.owner_seq = registers["atp_owner_seq"].data
        self.count = registers["atp_count"].data
        self.retx = registers["atp_retx"].data
        self.stats, self.forward = stats, forward

    def ingress(self, port: int, frame: bytes):
        """One ATP packet: (frame, egress_spec, mcast_grp, kind) or None = drop (absorbed)."""
        action, params = self.atp_job.exact.get((frame[JOB_OFF],), self.atp_job.default)
        n = len(frame)
        if action == PASS:
            self.stats.count(STAT_PASS, n)
            return self.forward.ipv4(frame)
        job, seq = frame[JOB_OFF], int.from_bytes(frame[BLOCK_OFF:BLOCK_OFF + 4], "big")
        i = aggregator_of(job, seq)
        # EXERCISE atp-collision BEGIN hint: held = the senders aggregator i holds (atp_bitmap, 0 = free); mine = it is held (held != 0) and its owner (atp_owner_job, atp_owner_seq) is this packet's (job, seq): held by any other (job, seq) is a collision
        held = self.bitmap.item(i)
        mine = held != 0 and self.owner_job.item(i) == job and self.owner_seq.item(i) == seq
        # EXERCISE END
        if frame[FLAGS_OFF] & RESULT:                     # the PS's result on its way to a worker
            if mine:
                self._release(i)
                self.stats.count(STAT_RELEASE, n)
            group = params[1] if action == MCAST else 0
            if group and frame[WORKER_OFF] == TO_ALL:    # the PS's one copy: to every worker
                self.stats.count(STAT_MCAST, n)
                routed = self.forward.ipv4(frame)        # TTL, or a drop when unrouted (atp.p4)
                if routed is None:
                    return None
                buf = routed[0]
                buf[UDP_CSUM] = buf[UDP_CSUM + 1] = 0
                return buf, routed[1], group, COPY
            return self.forward.ipv4(frame)
        expect = params[0]
        senders = wide_senders.of_frame(frame)
        lanes = np.frombuffer(frame, BE_I32, K, DATA_OFF)
        lo = i * K
        if held == 0 and senders and not senders & ~expect and not frame[FLAGS_OFF] & RETX:   # free: claim it
            self.owner_job[i], self.owner_seq[i] = job, seq
            self.values[lo:lo + K] = lanes.astype(np.int32).view(np.uint32)
            self.bitmap[i], self.count[i], self.retx[i] = senders, 1, 0
            self.stats.count(STAT_CLAIM, n)
        elif mine and not senders & held and not senders & ~expect:   # its own: add
            acc = self.values[lo:lo + K].view(np.int32)
            np.add(acc, lanes, out=acc, casting="unsafe")             # int32 wrap-around, as bit<32>
            self.bitmap[i] = held | senders
            self.count[i] = (self.count.item(i) + 1) & 0xFF
            self.retx[i] = self.retx.item(i) | frame[FLAGS_OFF] & RETX     # a resend in the sum
            self.stats.count(STAT_ADD, n)
        else:                                             # held by another, a resend, or foreign senders
            # EXERCISE atp-fallback BEGIN hint: the packet is not aggregated here: count STAT_COLLIDE when another (job, seq) holds the aggregator, else STAT_OVERLAP (a resend, or senders it cannot take), and send it on unchanged toward the job's PS by the IPv4 route (self.forward.ipv4(frame)), where the PS adds what fell back
            self.stats.count(STAT_COLLIDE if held and not mine else STAT_OVERLAP, n)
            return self.forward.ipv4(frame)
            # EXERCISE END
        have = self.bitmap.item(i)
        if have & expect != expect:
            return None                                   # absorbed: the aggregator waits for the rest
        buf = bytearray(frame)                            # complete: the sum goes on to the PS
        buf[DATA_OFF:DATA_END] = self.values[lo:lo + K].astype(">u4").tobytes()
        wide_senders.write_frame(buf, have)
        buf[FLAGS_OFF] |= self.retx.item(i)               # its answer says a resend is in it
        buf[UDP_CSUM] = buf[UDP_CSUM + 1] = 0
        self._release(i)
        self.stats.count(STAT_DONE, n)
        return self.forward.ipv4(bytes(buf))

    def _release(self, i: int) -> None:
        self.bitmap[i] = 0
        self.count[i] = 0
        self.retx[i] = 0
