/* SwitchML-style aggregation (docs/design/aggregation.md, "Aggregation semantics" and
 * "Aggregation trees").
 *
 * State lives at top level so the control-plane names carry no control
 * prefix and the software switch can use the very same names.  Slot-version
 * r = ver * AGG_SLOTS + slot_base + slot owns values [r*K, r*K + K).
 *
 * The role (agg_job) and the checks come from job.p4's JobRole, applied before
 * the dense/sparse branch; this control only updates the registers and leaves
 * its verdict in meta.verdict for AggOut.
 */
#ifndef AGGLAB_AGGREGATE_P4
#define AGGLAB_AGGREGATE_P4

#include "sparse.p4"   /* sp_next, sp_exp_next: a sparse call's lead round registers its first block */

register<bit<32>>(2 * AGG_SLOTS * AGG_K) agg_values;
register<bit<32>>(2 * AGG_SLOTS) agg_bitmap;
register<bit<8>>(2 * AGG_SLOTS) agg_count;
register<bit<8>>(2 * AGG_SLOTS) agg_exp;
register<bit<8>>(2 * AGG_SLOTS) agg_final;   /* 1: agg_values[r] is the tree's result */
register<bit<32>>(2 * AGG_SLOTS) agg_block;  /* block of the round held in r (read by the reroute carry) */
register<bit<32>>(2 * AGG_SLOTS) agg_rnext;  /* next_block of the round's result (a sparse lead: min next) */

#define AGG_ADD_LANE(i) LANE_ADD(agg_values, i)
#define AGG_COPY_LANE(i) LANE_COPY(agg_values, i)
#define AGG_STORE_LANE(i) LANE_STORE(agg_values, i)

control Aggregate(inout headers_t hdr, inout meta_t meta,
                  inout standard_metadata_t standard_metadata) {
    bit<32> r;      /* this slot-version (meta.r)                */
    bit<32> o;      /* the other version of the same slot        */
    bit<32> base;   /* first value lane of r                     */
    bit<32> mask;   /* 1 << child                                */
    bit<32> bm;
    bit<32> obm;
    bit<32> keep;   /* 0 on the first contribution, else all ones */
    bit<32> lane;
    bit<8>  cnt;
    bit<8>  e;
    bit<8>  fin;
    bit<32> cbase;  /* first sp_next cell of the slot (sparse lead) */
    bit<32> n;
    bit<32> nx;
    bit<8>  ex;
    bit<8>  lexp;   /* the packet's exp as sent (a sparse lead: its announcement) */

    apply {
        r = meta.r;
        o = meta.o;
        base = r * AGG_K;
        mask = (bit<32>)1 << meta.child;
        if (meta.role == ROLE_PARENT) {
            @atomic {
                agg_count.read(cnt, r);
                if (cnt == meta.fan_in) {
                    AGG_FOR_EACH_VALUE(AGG_STORE_LANE)
                    agg_exp.write(r, hdr.agg.exp);
                    agg_rnext.write(r, hdr.agg.next_block);
                    agg_final.write(r, 1);
                    meta.verdict = OUT_MCAST;
                }   /* else a stale result: dropped */
            }
        } else {
            @atomic {
                agg_bitmap.read(bm, r);
                if ((bm & mask) == 0) {
                    lexp = hdr.agg.exp;    /* before a completion overwrites it */
                    if (bm == 0) {
                        agg_block.write(r, hdr.agg.block);   /* a round starts: which one */
                    }
                    /* Shadow copy: our result of the other version was
                     * received, so its slot may be reused. */
                    // EXERCISE shadow-copy BEGIN hint: read agg_bitmap[o] and clear this child's bit (mask) there: its packet for r proves it got o's result
                    agg_bitmap.read(obm, o);
                    agg_bitmap.write(o, obm & ~mask);
                    // EXERCISE END
                    // EXERCISE aggregate-add BEGIN hint: keep = 0 on the first contribution else all ones; AGG_FOR_EACH_VALUE(AGG_ADD_LANE); max exponent into agg_exp, count+1 into agg_count, set mask in agg_bitmap, count STAT_CONTRIB; when cnt == meta.fan_in: agg_final = FINAL_AT_ROOT, meta.verdict = OUT_DONE
                    keep = (bm == 0) ? 32w0 : 32w0xFFFFFFFF;
                    AGG_FOR_EACH_VALUE(AGG_ADD_LANE)
                    agg_exp.read(e, r);
                    e = e & (bit<8>)keep;
                    if (hdr.agg.exp > e) { e = hdr.agg.exp; }
                    agg_exp.write(r, e);
                    agg_count.read(cnt, r);
                    cnt = (cnt & (bit<8>)keep) + 1;
                    agg_count.write(r, cnt);
                    agg_bitmap.write(r, bm | mask);
                    agg_final.read(fin, r);
                    agg_final.write(r, fin & (bit<8>)keep);   /* a round starts */
                    agg_stats.count(STAT_CONTRIB);
                    if (cnt == meta.fan_in) {
                        hdr.agg.exp = e;
                        agg_final.write(r, FINAL_AT_ROOT);
                        meta.verdict = OUT_DONE;
                    }
                    // EXERCISE END
                    if ((hdr.agg.flags & AGG_FLAG_LEAD) != 0) {
                        /* a sparse call's lead: the child announces its first
                         * sparse block of the column (sparse.p4's sp_next) */
                        cbase = meta.slot_idx * AGG_MAX_WORKERS;
                        sp_next.write(cbase + (bit<32>)meta.child, hdr.agg.next_block);
                        sp_exp_next.write(cbase + (bit<32>)meta.child, lexp);
                        if (meta.verdict == OUT_DONE) {
                            /* the result names the column's first sparse round
                             * and its exponent, as a sparse result does */
                            n = AGG_NEXT_NONE;
                            e = 0;
                            AGG_FOR_EACH_CHILD(SP_MIN_CHILD)
                            hdr.agg.next_block = n;
                            hdr.agg.exp = e;
                            agg_exp.write(r, e);
                        }
                    }
                    if (meta.verdict == OUT_DONE) {
                        agg_rnext.write(r, hdr.agg.next_block);
                    }
                } else {
                    // EXERCISE aggregate-duplicate BEGIN hint: bit already set: before completion count STAT_DUP_DROP (and drop); after it copy the stored lanes (AGG_COPY_LANE), agg_exp and agg_final into the packet and set meta.verdict = OUT_DUP
                    agg_count.read(cnt, r);
                    if (cnt != meta.fan_in) {
                        agg_stats.count(STAT_DUP_DROP);
                    } else {
                        /* The sender lost the result (or, at an inner
                         * switch without it, the partial was lost). */
                        AGG_FOR_EACH_VALUE(AGG_COPY_LANE)
                        agg_exp.read(hdr.agg.exp, r);
                        agg_final.read(meta.fin, r);
                        meta.verdict = OUT_DUP;
                    }
                    // EXERCISE END
                    if (meta.verdict == OUT_DUP) {
                        agg_rnext.read(hdr.agg.next_block, r);   /* the result's next */
                    }
                }
            }
        }
    }
}

/* Egress half: results leave with the service address as source and the
 * receiver's address as destination; a port without agg_reply entry gets none. */
control AggregateEgress(inout headers_t hdr, inout meta_t meta,
                        inout standard_metadata_t standard_metadata) {
    @name(".agg_set_dst")
    action agg_set_dst(mac_t smac, ip4_t sip, mac_t dmac, ip4_t dip) {
        hdr.ethernet.srcAddr = smac;
        hdr.ethernet.dstAddr = dmac;
        hdr.ipv4.srcAddr = sip;
        hdr.ipv4.dstAddr = dip;
    }

    @name(".drop")
    action drop() { mark_to_drop(standard_metadata); }

    @name(".agg_reply")
    table agg_reply {
        key = { standard_metadata.egress_port: exact; }
        actions = { agg_set_dst; drop; }
        default_action = drop();
        size = 512;
    }

    apply {
        hdr.udp.checksum = 0;
        agg_reply.apply();
    }
}

#endif
