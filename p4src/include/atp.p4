/* ATP-style best-effort aggregation in one pool every job shares (docs/guide/atp.md).
 *
 * A packet flagged AGG_FLAG_ATP carries (job, seq = block, sender set, one bit per rank)
 * toward its job's parameter server (an ordinary IPv4 destination). The sender set is
 * ATP_MAX_WORKERS = 64 bits: its low word is next_block, its high word the dense fields ATP
 * does not use (tree ++ epoch ++ ver ++ slot, ATP_SENDERS_HI), so a job of 64 workers fits
 * (two such jobs fill a k=8 fat-tree's 128 hosts) and the header keeps its layout. On a
 * switch with an atp_job entry for the job, it takes the aggregator
 * crc32(job, seq) % ATP_POOL if that is free or already (job, seq)'s, and adds its values;
 * when the aggregator holds every sender of the entry's `expect` its sum goes on toward
 * the PS and the aggregator is released. An aggregator held by another (job, seq), or a
 * sender set it already holds (a resend), sends the packet on unaggregated: the PS sums
 * what falls back. A result coming back from the PS releases an aggregator (job, seq) still
 * holds. A resend (RETX) added into an aggregator marks it (atp_retx), and its sum leaves
 * with RETX whichever packet completed it: the workers time only answers no resend is in
 * (Karn), and an unmarked sum that held a worker's resend was timed from its first send.
 * Everything that leaves goes by forward.p4's ipv4_lpm (meta.absorbed == 0).
 * softswitch/atp.py is the same control in Python.
 */
#ifndef AGGLAB_ATP_P4
#define AGGLAB_ATP_P4

/* ATP's own defines (read by ground/wire.py with constants.p4's) */
#define AGG_FLAG_ATP     32          /* agg_h flag: best effort in the shared pool (atp.p4); next_block (+ ATP_SENDERS_HI) = the sender set */
#define ATP_MAX_WORKERS  64          /* ranks of one ATP job: the sender set's width (next_block + ATP_SENDERS_HI) */
#define ATP_POOL         256         /* aggregators per switch, indexed by crc32(job, seq) % ATP_POOL */
#define ATP_STATS_SIZE   8           /* entries of the atp_stats counter      */
#define ATP_STAT_CLAIM   0           /* a free aggregator taken by (job, seq) */
#define ATP_STAT_ADD     1           /* contribution added to its own aggregator */
#define ATP_STAT_DONE    2           /* aggregator complete: its sum goes on to the PS, released */
#define ATP_STAT_COLLIDE 3           /* aggregator held by another (job, seq): sent on unaggregated */
#define ATP_STAT_OVERLAP 4           /* a resend (RETX, or senders already in it) or foreign senders: sent on unaggregated */
#define ATP_STAT_RELEASE 5           /* the holder's result passed: aggregator released */
#define ATP_STAT_PASS    6           /* ATP packet of a job this switch does not aggregate: forwarded */
#define ATP_STAT_MCAST   7           /* the PS's result to every worker: multicast at the PS's ToR */
#define ATP_TO_ALL       0xFF        /* agg_h worker of a PS result for every worker (--atp-multicast) */

register<bit<32>>(ATP_POOL * AGG_K) atp_values;
register<bit<64>>(ATP_POOL) atp_bitmap;      /* senders in the aggregator; 0 = free */
register<bit<8>>(ATP_POOL) atp_owner_job;
register<bit<32>>(ATP_POOL) atp_owner_seq;
register<bit<8>>(ATP_POOL) atp_count;
register<bit<8>>(ATP_POOL) atp_retx;        /* AGG_FLAG_RETX when a resend was added in; else 0 */

counter(ATP_STATS_SIZE, CounterType.packets) atp_stats;

#define ATP_ADD_LANE(i) LANE_ADD(atp_values, i)
/* the packet's 64-bit sender set: high word in the fields ATP leaves unused, low word next_block */
#define ATP_SENDERS_HI (hdr.agg.tree ++ hdr.agg.epoch ++ hdr.agg.ver ++ hdr.agg.slot)

control Atp(inout headers_t hdr, inout meta_t meta,
            inout standard_metadata_t standard_metadata) {
    bit<64> expect;     /* atp_aggregate's parameter: the senders this switch waits for */
    bit<64> senders;    /* the packet's sender set (ATP_SENDERS_HI ++ next_block) */
    bit<1>  hit;
    bit<32> idx;        /* the aggregator of (job, seq) */
    bit<32> base;       /* its first value lane */
    bit<64> held;
    bit<8>  ojob;
    bit<32> oseq;
    bit<8>  cnt;
    bit<8>  retx;       /* the aggregator's atp_retx, with this packet's RETX when it adds */
    bit<32> keep;       /* 0 when claiming a free aggregator, else all ones */
    bit<32> lane;
    bit<1>  mine;
    bit<16> group;      /* atp_aggregate_mcast's multicast group (the PS's ToR): 0 = none */

    @name(".atp_aggregate")
    action atp_aggregate(bit<64> expect_set) {
        expect = expect_set;
        hit = 1;
    }

    /* The PS's ToR with --atp-multicast: a result the PS addressed to every worker
     * (worker == ATP_TO_ALL) is replicated through `group`, one copy per worker, each
     * addressed to its worker in egress (forward.p4's CopyDst, keyed by the copy's rid). */
    @name(".atp_aggregate_mcast")
    action atp_aggregate_mcast(bit<64> expect_set, bit<16> mgrp) {
        expect = expect_set;
        group = mgrp;
        hit = 1;
    }

    @name(".atp_pass")
    action atp_pass() { hit = 0; }

    @name(".atp_job")
    table atp_job {
        key = { hdr.agg.job: exact; }
        actions = { atp_aggregate; atp_aggregate_mcast; atp_pass; }
        default_action = atp_pass();
        size = 256;
    }

    apply {
        meta.absorbed = 0;
        hit = 0;
        expect = 0;                                  /* set by atp_aggregate; read only after a hit */
        group = 0;
        retx = 0;
        atp_job.apply();
        if (hit == 0) {
            atp_stats.count(ATP_STAT_PASS);
        } else {
            senders = ATP_SENDERS_HI ++ hdr.agg.next_block;
            // EXERCISE atp-hash BEGIN hint: idx = the aggregator of (job, seq = hdr.agg.block): hash(idx, HashAlgorithm.crc32, 32w0, { hdr.agg.job, hdr.agg.block }, (bit<32>)ATP_POOL), the twin's aggregator_of
            hash(idx, HashAlgorithm.crc32, 32w0, { hdr.agg.job, hdr.agg.block }, (bit<32>)ATP_POOL);
            // EXERCISE END
            base = idx * AGG_K;
            @atomic {
                // EXERCISE atp-collision BEGIN hint: held = atp_bitmap[idx] (0 = free); read its owner (atp_owner_job, atp_owner_seq) into ojob, oseq; mine = 1 when it is held and owned by this packet's (hdr.agg.job, hdr.agg.block), else 0
                atp_bitmap.read(held, idx);
                atp_owner_job.read(ojob, idx);
                atp_owner_seq.read(oseq, idx);
                mine = (held != 0 && ojob == hdr.agg.job && oseq == hdr.agg.block) ? 1w1 : 1w0;
                // EXERCISE END
                if ((hdr.agg.flags & AGG_FLAG_RESULT) != 0) {
                    if (mine == 1) {                 /* the PS's result: free what a resend left */
                        atp_bitmap.write(idx, 0);
                        atp_count.write(idx, 0);
                        atp_retx.write(idx, 0);
                        atp_stats.count(ATP_STAT_RELEASE);
                    }
                    if (group != 0 && hdr.agg.worker == ATP_TO_ALL) {
                        /* forward.p4 still routes it (TTL, a drop if unrouted); the group wins */
                        standard_metadata.mcast_grp = group;
                        meta.is_copy = 1;
                        hdr.udp.checksum = 0;        /* each copy's destination changes */
                        atp_stats.count(ATP_STAT_MCAST);
                    }
                } else if (held == 0 && senders != 0 && (senders & ~expect) == 0
                           && (hdr.agg.flags & AGG_FLAG_RETX) == 0) {
                    keep = 0;                        /* free: claim it (not a resend: no partners) */
                    AGG_FOR_EACH_VALUE(ATP_ADD_LANE)
                    atp_owner_job.write(idx, hdr.agg.job);
                    atp_owner_seq.write(idx, hdr.agg.block);
                    atp_bitmap.write(idx, senders);
                    atp_count.write(idx, 1);
                    atp_retx.write(idx, 0);
                    held = senders;
                    atp_stats.count(ATP_STAT_CLAIM);
                    meta.absorbed = 1;
                } else if (mine == 1 && (senders & held) == 0
                           && (senders & ~expect) == 0) {
                    keep = 32w0xFFFFFFFF;            /* its own: add the senders it lacks */
                    AGG_FOR_EACH_VALUE(ATP_ADD_LANE)
                    held = held | senders;
                    atp_bitmap.write(idx, held);
                    atp_count.read(cnt, idx);
                    atp_count.write(idx, cnt + 1);
                    atp_retx.read(retx, idx);    /* a resend in the sum: its answer says so */
                    retx = retx | (hdr.agg.flags & AGG_FLAG_RETX);
                    atp_retx.write(idx, retx);
                    atp_stats.count(ATP_STAT_ADD);
                    meta.absorbed = 1;
                } else {
                    /* not aggregated here: meta.absorbed stays 0, so ipv4_lpm sends it on unchanged to the PS */
                    // EXERCISE atp-fallback BEGIN hint: count ATP_STAT_COLLIDE (atp_stats) when another (job, seq) holds the aggregator (held != 0, mine == 0), else ATP_STAT_OVERLAP (a resend, or senders it cannot take)
                    if (held != 0 && mine == 0) {
                        atp_stats.count(ATP_STAT_COLLIDE);   /* another (job, seq): on to the PS as it is */
                    } else {
                        atp_stats.count(ATP_STAT_OVERLAP);   /* a resend or foreign senders: as it is */
                    }
                    // EXERCISE END
                }
                if (meta.absorbed == 1 && (held & expect) == expect) {
                    /* complete: the packet carries the sum (LANE_ADD wrote it) on to the PS */
                    hdr.agg.tree = held[63:56];
                    hdr.agg.epoch = held[55:48];
                    hdr.agg.ver = held[47:47];
                    hdr.agg.slot = held[46:32];
                    hdr.agg.next_block = held[31:0];
                    hdr.agg.flags = hdr.agg.flags | retx;
                    hdr.udp.checksum = 0;
                    atp_bitmap.write(idx, 0);
                    atp_count.write(idx, 0);
                    atp_retx.write(idx, 0);
                    atp_stats.count(ATP_STAT_DONE);
                    meta.absorbed = 0;
                }
            }
        }
    }
}

#endif
