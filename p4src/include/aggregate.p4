/* SwitchML-style aggregation (docs/design.md, "Aggregation semantics" and
 * "Aggregation trees").
 *
 * State lives at top level so the control-plane names carry no control
 * prefix and the software switch can use the very same names.  Slot-version
 * r = ver * AGG_SLOTS + slot_base + slot owns values [r*K, r*K + K).
 *
 * One switch may play three roles per (job, tree, epoch), chosen by the
 * agg_job entry of the ingress port: the tree's root (agg_child: results are
 * multicast to the children), an inner switch (agg_child_of: a complete
 * partial sum goes up to the parent as one contribution) or the child side
 * of the parent port (agg_from_parent: the final result comes down, is
 * stored for retransmissions and multicast to the children).
 */
#ifndef AGGLAB_AGGREGATE_P4
#define AGGLAB_AGGREGATE_P4


#define ROLE_NONE    0
#define ROLE_ROOT    1
#define ROLE_INNER   2
#define ROLE_PARENT  3               /* packet came down from the parent */

register<bit<32>>(2 * AGG_SLOTS * AGG_K) agg_values;
register<bit<32>>(2 * AGG_SLOTS) agg_bitmap;
register<bit<8>>(2 * AGG_SLOTS) agg_count;
register<bit<8>>(2 * AGG_SLOTS) agg_exp;
register<bit<8>>(2 * AGG_SLOTS) agg_final;   /* 1: agg_values[r] is the tree's result */
counter(AGG_STATS_SIZE, CounterType.packets) agg_stats;

/* First copy: add lane i (keep = 0 on the first contribution, which turns
 * the add into an overwrite without a branch per lane) and leave the new
 * partial sum in the packet; it is only emitted if this completes the slot. */
#define AGG_ADD_LANE(i) \
    agg_values.read(lane, base + i); \
    lane = (lane & keep) + hdr.data.v##i; \
    agg_values.write(base + i, lane); \
    hdr.data.v##i = lane;

/* Duplicate after completion: answer with (or re-send) the stored sum. */
#define AGG_COPY_LANE(i) \
    agg_values.read(hdr.data.v##i, base + i);

/* Result from the parent: keep it for the children's retransmissions. */
#define AGG_STORE_LANE(i) \
    agg_values.write(base + i, hdr.data.v##i);

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
    bit<8>  fin;

    /* The tree (not the packet) says who the sender is: child index, how
     * many children complete a slot, where results go, which slot window. */
    @name(".agg_child")
    action agg_child(bit<8> child, bit<8> fan_in, bit<16> mgrp, bit<16> slot_base) {
        meta.role = ROLE_ROOT;
        meta.child = child;
        meta.fan_in = fan_in;
        meta.mgrp = mgrp;
        meta.slot_base = slot_base;
    }

    @name(".agg_child_of")
    action agg_child_of(bit<8> child, bit<8> fan_in, bit<16> mgrp, bit<16> slot_base,
                        port_t parent_port) {
        meta.role = ROLE_INNER;
        meta.child = child;
        meta.fan_in = fan_in;
        meta.mgrp = mgrp;
        meta.slot_base = slot_base;
        meta.parent_port = parent_port;
    }

    @name(".agg_from_parent")
    action agg_from_parent(bit<8> fan_in, bit<16> mgrp, bit<16> slot_base) {
        meta.role = ROLE_PARENT;
        meta.child = 0;
        meta.fan_in = fan_in;
        meta.mgrp = mgrp;
        meta.slot_base = slot_base;
    }

    @name(".agg_reject")
    action agg_reject() {
        meta.role = ROLE_NONE;
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
        actions = { agg_child; agg_child_of; agg_from_parent; agg_reject; }
        default_action = agg_reject();
        size = 4096;
    }

    action mark_result() {
        hdr.agg.flags = hdr.agg.flags | AGG_FLAG_RESULT;
        meta.is_result = 1;
    }

    /* An inner switch's partial travels as an ordinary contribution: no
     * RESULT flag, addresses as they came, payload changed so no UDP checksum. */
    action send_up() {
        hdr.agg.flags = hdr.agg.flags & ~(bit<8>)AGG_FLAG_RESULT;
        hdr.udp.checksum = 0;
        standard_metadata.egress_spec = meta.parent_port;
    }

    apply {
        agg_job.apply();
        idx = (bit<32>)meta.slot_base + (bit<32>)hdr.agg.slot;
        if (meta.role == ROLE_NONE) {
            /* agg_reject already dropped and counted */
        } else if (idx >= AGG_SLOTS || meta.child >= AGG_MAX_WORKERS ||
                   (meta.role == ROLE_PARENT && (hdr.agg.flags & AGG_FLAG_RESULT) == 0)) {
            /* A bad slot_base/child from the controller must not spill into
             * another job's slots or alias bitmap bits; only results may come
             * down from the parent. */
            agg_reject();
        } else {
            r = (bit<32>)hdr.agg.ver * AGG_SLOTS + idx;
            o = (bit<32>)(hdr.agg.ver ^ 1) * AGG_SLOTS + idx;
            base = r * AGG_K;
            mask = (bit<32>)1 << meta.child;
            if (meta.role == ROLE_PARENT) {
                @atomic {
                    agg_count.read(cnt, r);
                    if (cnt == meta.fan_in) {
                        AGG_FOR_EACH_VALUE(AGG_STORE_LANE)
                        agg_exp.write(r, hdr.agg.exp);
                        agg_final.write(r, 1);
                        mark_result();
                        standard_metadata.mcast_grp = meta.mgrp;
                    } else {
                        mark_to_drop(standard_metadata);   /* stale result */
                    }
                }
            } else {
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
                        agg_final.read(fin, r);
                        agg_final.write(r, fin & (bit<8>)keep);   /* a round starts */
                        agg_stats.count(STAT_CONTRIB);
                        if (cnt == meta.fan_in) {
                            hdr.agg.exp = e;
                            agg_stats.count(STAT_COMPLETE);
                            if (meta.role == ROLE_ROOT) {
                                agg_final.write(r, 1);
                                mark_result();
                                standard_metadata.mcast_grp = meta.mgrp;
                            } else {
                                send_up();
                            }
                        } else {
                            mark_to_drop(standard_metadata);
                        }
                    } else {
                        agg_count.read(cnt, r);
                        agg_final.read(fin, r);
                        if (cnt != meta.fan_in) {
                            mark_to_drop(standard_metadata);
                            agg_stats.count(STAT_DUP_DROP);
                        } else {
                            /* The sender lost the result (or, at an inner
                             * switch without it, the partial was lost). */
                            AGG_FOR_EACH_VALUE(AGG_COPY_LANE)
                            agg_exp.read(hdr.agg.exp, r);
                            if (meta.role == ROLE_ROOT || fin == 1) {
                                mark_result();
                                standard_metadata.egress_spec = standard_metadata.ingress_port;
                                agg_stats.count(STAT_DUP_REPLY);
                            } else {
                                send_up();
                                agg_stats.count(STAT_DUP_UP);
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
