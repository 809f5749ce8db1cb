/* SwitchML-style aggregation (docs/design.md, "Aggregation semantics").
 *
 * State lives at top level so the control-plane names carry no control
 * prefix and the software switch can use the very same names.  Slot-version
 * r = ver * AGG_SLOTS + slot_base + slot owns values [r*K, r*K + K).
 */
#ifndef AGGLAB_AGGREGATE_P4
#define AGGLAB_AGGREGATE_P4

register<bit<32>>(2 * AGG_SLOTS * AGG_K) agg_values;
register<bit<32>>(2 * AGG_SLOTS) agg_bitmap;
register<bit<8>>(2 * AGG_SLOTS) agg_count;
register<bit<8>>(2 * AGG_SLOTS) agg_exp;
counter(AGG_STATS_SIZE, CounterType.packets) agg_stats;

/* First copy: add lane i (keep = 0 on the first contribution, which turns
 * the add into an overwrite without a branch per lane) and leave the new
 * partial sum in the packet; it is only emitted if this completes the slot. */
#define AGG_ADD_LANE(i) \
    agg_values.read(lane, base + i); \
    lane = (lane & keep) + hdr.data.v##i; \
    agg_values.write(base + i, lane); \
    hdr.data.v##i = lane;

/* Duplicate after completion: answer with the stored result. */
#define AGG_COPY_LANE(i) \
    agg_values.read(hdr.data.v##i, base + i);

control Aggregate(inout headers_t hdr, inout meta_t meta,
                  inout standard_metadata_t standard_metadata) {
    bit<32> idx;    /* slot_base + slot                          */
    bit<32> r;      /* this slot-version                         */
    bit<32> o;      /* the other version of the same slot        */
    bit<32> base;   /* first value lane of r                     */
    bit<32> mask;   /* 1 << child                                */
    bit<32> bm;
    bit<32> obm;
    bit<32> keep;   /* 0 on the first contribution, else all ones */
    bit<32> lane;
    bit<8>  cnt;
    bit<8>  e;

    /* The tree (not the packet) says who the sender is: child index, how
     * many children complete a slot, where results go, which slot window. */
    @name(".agg_child")
    action agg_child(bit<8> child, bit<8> fan_in, bit<16> mgrp, bit<16> slot_base) {
        meta.child = child;
        meta.fan_in = fan_in;
        meta.mgrp = mgrp;
        meta.slot_base = slot_base;
    }

    @name(".agg_reject")
    action agg_reject() {
        mark_to_drop(standard_metadata);
        agg_stats.count(STAT_REJECT);
    }

    @name(".agg_job")
    table agg_job {
        key = {
            hdr.agg.job: exact;
            hdr.agg.tree: exact;
            hdr.agg.epoch: exact;
            standard_metadata.ingress_port: exact;
        }
        actions = { agg_child; agg_reject; }
        default_action = agg_reject();
        size = 1024;
    }

    action mark_result() {
        hdr.agg.flags = hdr.agg.flags | AGG_FLAG_RESULT;
        meta.is_result = 1;
    }

    apply {
        switch (agg_job.apply().action_run) {
            agg_child: {
                idx = (bit<32>)meta.slot_base + (bit<32>)hdr.agg.slot;
                /* A bad slot_base/child from the controller must not spill
                 * into another job's slots or alias bitmap bits. */
                if (idx >= AGG_SLOTS || meta.child >= AGG_MAX_WORKERS) {
                    agg_reject();
                } else {
                    r = (bit<32>)hdr.agg.ver * AGG_SLOTS + idx;
                    o = (bit<32>)(hdr.agg.ver ^ 1) * AGG_SLOTS + idx;
                    base = r * AGG_K;
                    mask = (bit<32>)1 << meta.child;
                    @atomic {
                        agg_bitmap.read(bm, r);
                        if ((bm & mask) == 0) {
                            /* Shadow copy: our result of the other version was
                             * received, so its slot may be reused. */
                            agg_bitmap.read(obm, o);
                            agg_bitmap.write(o, obm & ~mask);
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
                            agg_stats.count(STAT_CONTRIB);
                            if (cnt == meta.fan_in) {
                                hdr.agg.exp = e;
                                mark_result();
                                standard_metadata.mcast_grp = meta.mgrp;
                                agg_stats.count(STAT_COMPLETE);
                            } else {
                                mark_to_drop(standard_metadata);
                            }
                        } else {
                            agg_count.read(cnt, r);
                            if (cnt == meta.fan_in) {
                                /* The sender lost the multicast result. */
                                AGG_FOR_EACH_VALUE(AGG_COPY_LANE)
                                agg_exp.read(hdr.agg.exp, r);
                                mark_result();
                                standard_metadata.egress_spec = standard_metadata.ingress_port;
                                agg_stats.count(STAT_DUP_REPLY);
                            } else {
                                mark_to_drop(standard_metadata);
                                agg_stats.count(STAT_DUP_DROP);
                            }
                        }
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
