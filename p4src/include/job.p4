/* The job table and what both aggregation pipelines share (docs/design/,
 * "Data-plane names", "Aggregation trees" and "Sparse pipeline").
 *
 * Why one table: the dense (aggregate.p4) and the sparse (sparse.p4) pipeline
 * ask the same question of a packet, namely which role this switch plays for
 * its (job, tree, epoch) on the ingress port, so agg_job is looked up once,
 * before the AGG_FLAG_SPARSE branch, and the controller installs one entry
 * per tree port for both.  The bounds checks that keep a bad entry from
 * spilling into another job's slots are made here too.
 *
 * One switch may play three roles per (job, tree, epoch): the tree's root
 * (agg_child: results are multicast to the children), an inner switch
 * (agg_child_of: a completed partial goes up to the parent as one
 * contribution) or the child side of the parent port (agg_from_parent: the
 * final result comes down, is stored for retransmissions and multicast).
 *
 * Each pipeline ends by setting meta.verdict; AggOut turns that verdict into the
 * packet's way out (and counts completions and duplicate answers), for both
 * pipelines alike.
 */
#ifndef AGGLAB_JOB_P4
#define AGGLAB_JOB_P4

#define ROLE_NONE    0
#define ROLE_ROOT    1
#define ROLE_INNER   2
#define ROLE_PARENT  3               /* packet came down from the parent */

#define OUT_DROP     0               /* meta.verdict: dropped (the default)             */
#define OUT_MCAST    1               /* result multicast to the children (mgrp)     */
#define OUT_UP       2               /* partial up to the parent as a contribution  */
#define OUT_DUP      3               /* a duplicate answered with the stored sum    */
#define OUT_DONE     4               /* completed here: OUT_MCAST at the root, else OUT_UP */
#define OUT_RELEASE  5               /* sparse release: a RESULT to egress_spec (sparse.p4)   */

/* What a completing switch writes to its *_final register: only the root holds the
 * tree's result at completion (an inner switch gets it from its parent later, and its
 * final is 0 then: a new round cleared it, and a final round is answered as OUT_DUP). */
#define FINAL_AT_ROOT ((meta.role == ROLE_ROOT) ? 8w1 : 8w0)

counter(AGG_STATS_SIZE, CounterType.packets) agg_stats;
/* Why each rejected packet was dropped (REJ_* in constants.p4); STAT_REJECT is their sum. */
counter(AGG_REJECTS_SIZE, CounterType.packets) agg_rejects;

/* Value lanes, per register: the pipelines pass their own (agg_values, sp_values).
 * Add lane i (keep = 0 turns the add into an overwrite: a round starts) and leave
 * the new partial sum in the packet; it is only emitted if this completes the slot. */
#define LANE_ADD(reg, i) \
    reg.read(lane, base + i); \
    lane = (lane & keep) + hdr.data.v##i; \
    reg.write(base + i, lane); \
    hdr.data.v##i = lane;

/* Duplicate after completion: answer with (or re-send) the stored sum. */
#define LANE_COPY(reg, i) \
    reg.read(hdr.data.v##i, base + i);

/* Result from the parent: keep it for the children's retransmissions. */
#define LANE_STORE(reg, i) \
    reg.write(base + i, hdr.data.v##i);

control JobRole(inout headers_t hdr, inout meta_t meta,
                inout standard_metadata_t standard_metadata) {
    /* The tree (not the packet) says who the sender is: child index, how
     * many children complete a slot, where results go, which slot range
     * the job owns (slot_base .. slot_base + slots - 1) and which worker
     * field a packet on this port must carry (the rank of the worker
     * behind it; AGG_ANY_WORKER on a port that leads to a switch). */
    @name(".agg_child")
    action agg_child(bit<8> child, bit<8> fan_in, bit<16> mgrp, bit<16> slot_base,
                     bit<16> slots, bit<16> worker) {
        meta.role = ROLE_ROOT;
        meta.child = child;
        meta.fan_in = fan_in;
        meta.mgrp = mgrp;
        meta.slot_base = slot_base;
        meta.slots = slots;
        meta.worker = worker;
    }

    @name(".agg_child_of")
    action agg_child_of(bit<8> child, bit<8> fan_in, bit<16> mgrp, bit<16> slot_base,
                        bit<16> slots, bit<16> worker, port_t parent_port) {
        agg_child(child, fan_in, mgrp, slot_base, slots, worker);
        meta.role = ROLE_INNER;
        meta.parent_port = parent_port;
    }

    @name(".agg_from_parent")
    action agg_from_parent(bit<8> fan_in, bit<16> mgrp, bit<16> slot_base, bit<16> slots) {
        agg_child(0, fan_in, mgrp, slot_base, slots, AGG_ANY_WORKER);
        meta.role = ROLE_PARENT;
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

    apply {
        meta.verdict = OUT_DROP;
        meta.role = ROLE_NONE;
        if (hdr.ipv4.totalLen != hdr.udp.length + 16w20 ||     /* (mod 2^16, hence the next line) */
            hdr.udp.length > 16w65515 ||
            hdr.udp.length < 16w24 ||
            (hdr.data.isValid() && hdr.udp.length < 16w24 + 4 * AGG_K) ||
            (bit<32>)hdr.ipv4.totalLen + 14 > standard_metadata.packet_length) {
            /* Lengths that disagree with each other, with the headers the parser
             * found or with the frame: a forged or damaged packet. */
            agg_reject();
            agg_rejects.count(REJ_LENGTH);
        } else {
            agg_job.apply();
            meta.slot_idx = (bit<32>)meta.slot_base + (bit<32>)hdr.agg.slot;
            if (meta.role == ROLE_NONE) {
                /* agg_reject (the default) already dropped and counted: no entry for
                 * this (job, tree, epoch, port): another job's id, an old epoch, a
                 * port outside the job */
                agg_rejects.count(REJ_NO_ENTRY);
            } else if ((bit<16>)hdr.agg.slot >= meta.slots || meta.slot_idx >= AGG_SLOTS) {
                /* Outside the job's own slot range: never another job's slots (nor,
                 * from a bad slot_base, past the registers). */
                agg_reject();
                agg_rejects.count(REJ_SLOT);
            } else if (meta.worker != AGG_ANY_WORKER && (bit<16>)hdr.agg.worker != meta.worker) {
                /* A member port may only speak for its own worker. */
                agg_reject();
                agg_rejects.count(REJ_WORKER);
            } else if (meta.child >= AGG_MAX_WORKERS) {
                /* A bad child index from the controller must not alias bitmap bits. */
                agg_reject();
                agg_rejects.count(REJ_ENTRY);
            } else if (meta.role == ROLE_PARENT &&
                       ((hdr.agg.flags & AGG_FLAG_RESULT) == 0 || !hdr.data.isValid())) {
                /* Only results may come down from the parent, with their values (a
                 * SPARSE|ACK header alone would store lanes of an invalid header). */
                agg_reject();
                agg_rejects.count(REJ_FROM_PARENT);
            } else {
                /* r: this slot-version; o: the other version of the same slot */
                meta.r = (bit<32>)hdr.agg.ver * AGG_SLOTS + meta.slot_idx;
                meta.o = (bit<32>)(hdr.agg.ver ^ 1) * AGG_SLOTS + meta.slot_idx;
            }
        }
    }
}

/* The verdict of either pipeline (meta.verdict) as the packet's way out.  A result
 * is flagged RESULT and meta.is_result sends it through agg_reply in egress; a
 * partial travels up as an ordinary contribution: no RESULT flag, addresses as
 * they came, payload changed so no UDP checksum.  A duplicate is answered back
 * to its sender where the stored sum is final (always at the root), else the
 * partial goes up again: the sender may have lost the result, or the partial
 * was lost on its way up. */
control AggOut(inout headers_t hdr, inout meta_t meta,
               inout standard_metadata_t standard_metadata) {
    action mark_result() {
        hdr.agg.flags = hdr.agg.flags | AGG_FLAG_RESULT;
        meta.is_result = 1;
    }

    action send_up() {
        hdr.agg.flags = hdr.agg.flags & ~(bit<8>)AGG_FLAG_RESULT;
        hdr.udp.checksum = 0;
        standard_metadata.egress_spec = meta.parent_port;
    }

    apply {
        if (meta.verdict == OUT_DONE) {
            agg_stats.count(STAT_COMPLETE);
            if (meta.role == ROLE_ROOT) {
                meta.verdict = OUT_MCAST;
            } else {
                meta.verdict = OUT_UP;
            }
        }
        if (meta.verdict == OUT_MCAST) {
            mark_result();
            standard_metadata.mcast_grp = meta.mgrp;
        } else if (meta.verdict == OUT_UP) {
            send_up();
        } else if (meta.verdict == OUT_RELEASE) {
            mark_result();                         /* egress_spec: the held worker's port */
        } else if (meta.verdict == OUT_DUP) {
            if (meta.role == ROLE_ROOT || meta.fin == 1) {
                mark_result();
                standard_metadata.egress_spec = standard_metadata.ingress_port;
                agg_stats.count(STAT_DUP_REPLY);
            } else {
                send_up();
                agg_stats.count(STAT_DUP_UP);
            }
        } else {
            mark_to_drop(standard_metadata);
        }
    }
}

#endif
