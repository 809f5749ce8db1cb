/* Block-sparse streaming aggregation, OmniReduce-style (docs/design/,
 * "Sparse pipeline").  Packets with AGG_FLAG_SPARSE come here instead of
 * aggregate.p4; same header and the same agg_job entry (job.p4's JobRole,
 * applied before the branch), own registers (prefix sp_), so a job can run
 * dense lead rounds and sparse rounds side by side.
 *
 * Why a block completes without everyone: each child announces the next
 * block it will contribute in this slot's column (sp_next); block m is
 * complete as soon as m is below the minimum of those announcements, since
 * no child will send anything for m any more.  The result tells everyone
 * the column's next round (that minimum) and its exponent (the largest
 * among the children that announced it).  P4 has no loops, so the minimum
 * is unrolled over AGG_MAX_WORKERS children (AGG_FOR_EACH_CHILD from the
 * generated values.p4); children >= fan_in count as AGG_NEXT_NONE so unused
 * register cells never hold the minimum down.
 *
 * Roles as for the dense pipeline: agg_child at the tree's root (results are
 * multicast), agg_child_of at a non-root switch (a completed block goes up as
 * one contribution carrying the local minimum), agg_from_parent on the
 * parent port (the tree's result comes down).  The verdict goes to job.p4's
 * AggOut through meta.verdict, as in aggregate.p4.
 */
#ifndef AGGLAB_SPARSE_P4
#define AGGLAB_SPARSE_P4

/* r = ver * AGG_SLOTS + slot_base + slot; per child (slot_base + slot) * MAX_WORKERS + child */
register<bit<32>>(2 * AGG_SLOTS * AGG_K) sp_values;
register<bit<32>>(2 * AGG_SLOTS) sp_block;      /* block of the round held in version r */
register<bit<32>>(2 * AGG_SLOTS) sp_bitmap;
register<bit<8>>(2 * AGG_SLOTS) sp_final;       /* 1: sp_values[r] is the tree's result */
register<bit<8>>(2 * AGG_SLOTS) sp_exp;         /* result (or partial) exponent         */
register<bit<32>>(2 * AGG_SLOTS) sp_rnext;      /* result (or partial) next block       */
register<bit<8>>(2 * AGG_SLOTS) sp_done;        /* 1: block completed at this switch    */
register<bit<32>>(2 * AGG_SLOTS) sp_ack;        /* children done with the held round    */
register<bit<16>>(2 * AGG_SLOTS) sp_held;       /* port+1 of a worker held back on it   */
register<bit<32>>(AGG_SLOTS * AGG_MAX_WORKERS) sp_next;      /* child's announced next */
register<bit<8>>(AGG_SLOTS * AGG_MAX_WORKERS) sp_exp_next;   /* its exponent           */

/* keep = 0 when this packet starts the round: the add becomes an overwrite. */
#define SP_ADD_LANE(i) LANE_ADD(sp_values, i)
#define SP_COPY_LANE(i) LANE_COPY(sp_values, i)
#define SP_STORE_LANE(i) LANE_STORE(sp_values, i)

/* One child of the unrolled min: n = min next, e = max exponent among the
 * children whose next equals n (ties on n raise e, a smaller n resets it). */
#define SP_MIN_CHILD(i) \
    if (meta.fan_in > i) { \
        sp_next.read(nx, cbase + i); \
        sp_exp_next.read(ex, cbase + i); \
        if (nx < n) { \
            n = nx; \
            e = ex; \
        } else if (nx == n && ex > e) { \
            e = ex; \
        } \
    }

control Sparse(inout headers_t hdr, inout meta_t meta,
               inout standard_metadata_t standard_metadata) {
    bit<32> idx;     /* slot_base + slot (meta.slot_idx)  */
    bit<32> r;       /* this slot-version (meta.r)        */
    bit<32> base;    /* first value lane of r             */
    bit<32> cbase;   /* first per-child cell of the slot  */
    bit<32> mask;    /* 1 << child                        */
    bit<32> bm;
    bit<32> blk;
    bit<32> keep;
    bit<32> lane;
    bit<32> n;
    bit<32> nx;
    bit<8>  e;
    bit<8>  ex;
    bit<8>  done;
    bit<8>  fin;
    bit<32> o;       /* the other version of the slot     */
    bit<32> oblk;
    bit<32> obm;
    bit<32> ack;
    bit<32> all;     /* every child's bit                 */
    bit<1>  hold;
    bit<16> held;

    apply {
        idx = meta.slot_idx;
        r = meta.r;
        o = meta.o;
        base = r * AGG_K;
        if (meta.fan_in >= AGG_MAX_WORKERS) {
            all = 32w0xFFFFFFFF;
        } else {
            all = ((bit<32>)1 << meta.fan_in) - 1;
        }
        if (meta.role == ROLE_PARENT) {
            @atomic {
                sp_block.read(blk, r);
                sp_bitmap.read(bm, r);
                sp_ack.read(ack, r);
                sp_final.read(fin, r);
                if (bm != 0 && blk == hdr.agg.block && fin == 1) {
                    /* the result again (the parent answering a probe or a
                     * resend passed up): multicast already; a child that
                     * lost it is answered here (OUT_DUP) */
                    agg_stats.count(STAT_DUP_DROP);
                } else if (bm != 0 && blk == hdr.agg.block) {
                    AGG_FOR_EACH_VALUE(SP_STORE_LANE)
                    sp_exp.write(r, hdr.agg.exp);
                    sp_rnext.write(r, hdr.agg.next_block);
                    sp_final.write(r, 1);
                    meta.verdict = OUT_MCAST;
                } else if (blk < hdr.agg.block && (bm == 0 || ack == all)) {
                    /* A round this subtree had no data for: adopt the
                     * tree's result (its held round is older and done). */
                    AGG_FOR_EACH_VALUE(SP_STORE_LANE)
                    sp_block.write(r, hdr.agg.block);
                    sp_bitmap.write(r, all);
                    sp_ack.write(r, 0);
                    sp_exp.write(r, hdr.agg.exp);
                    sp_rnext.write(r, hdr.agg.next_block);
                    sp_done.write(r, 1);
                    sp_final.write(r, 1);
                    meta.verdict = OUT_MCAST;
                } else {
                    agg_stats.count(STAT_SP_HOLD);   /* stale, or held back: dropped */
                }
            }
        } else {
            cbase = idx * AGG_MAX_WORKERS;
            mask = (bit<32>)1 << meta.child;
            @atomic {
                sp_block.read(blk, r);
                sp_bitmap.read(bm, r);
                if (bm != 0 && blk > hdr.agg.block) {
                    agg_stats.count(STAT_SP_HOLD);       /* stale: touches nothing, dropped */
                } else {
                    /* A packet for block m tells: its sender is done with
                     * every round below m (an ACK also with round m). */
                    sp_block.read(oblk, o);
                    sp_bitmap.read(obm, o);
                    if (obm != 0 && oblk < hdr.agg.block) {
                        sp_ack.read(ack, o);
                        sp_ack.write(o, ack | mask);
                    }
                    sp_ack.read(ack, r);
                    if (bm != 0 && (blk < hdr.agg.block ||
                                    (blk == hdr.agg.block && (hdr.agg.flags & AGG_FLAG_ACK) != 0))) {
                        ack = ack | mask;
                        sp_ack.write(r, ack);
                    }
                    if ((hdr.agg.flags & AGG_FLAG_ACK) != 0) {
                        sp_final.read(fin, r);
                        sp_held.read(held, r);
                        if (meta.role == ROLE_INNER && bm != 0 && blk == hdr.agg.block &&
                            fin == 1 && ack == all) {
                            meta.verdict = OUT_UP;          /* the whole subtree is done */
                        } else if (meta.role == ROLE_ROOT && bm != 0 && blk == hdr.agg.block &&
                                   ack == all && held != 0) {
                            /* the last child done with the held round, after a worker's
                             * new round was held back for it: the ACK goes to that
                             * worker as a release (RESULT|ACK, no values), so it sends
                             * again now, not after a timeout */
                            sp_held.write(r, 0);
                            standard_metadata.egress_spec = (bit<9>)(held - 1);
                            meta.verdict = OUT_RELEASE;
                        }
                    } else {
                        keep = 32w0xFFFFFFFF;
                        hold = 0;
                        if (bm == 0 || blk != hdr.agg.block) {
                            if (bm != 0 && ack != all) {
                                /* a child still needs the held round (at the root
                                 * its ACK releases a worker held back here) */
                                hold = 1;
                                if (meta.worker != AGG_ANY_WORKER) {
                                    sp_held.write(r, (bit<16>)standard_metadata.ingress_port + 1);
                                }
                            } else {
                                sp_block.write(r, hdr.agg.block);
                                sp_done.write(r, 0);
                                sp_final.write(r, 0);
                                sp_ack.write(r, 0);
                                sp_held.write(r, 0);
                                bm = 0;
                                keep = 0;
                            }
                        }
                        sp_final.read(fin, r);
                        if (hold == 1) {
                            agg_stats.count(STAT_SP_HOLD);
                        } else if ((bm & mask) != 0 || (meta.role == ROLE_INNER && fin == 1)) {
                            sp_done.read(done, r);
                            if (done == 0) {
                                agg_stats.count(STAT_DUP_DROP);
                            } else {
                                AGG_FOR_EACH_VALUE(SP_COPY_LANE)
                                sp_exp.read(hdr.agg.exp, r);
                                sp_rnext.read(hdr.agg.next_block, r);
                                meta.fin = fin;
                                meta.verdict = OUT_DUP;
                            }
                        } else {
                            sp_bitmap.write(r, bm | mask);
                            AGG_FOR_EACH_VALUE(SP_ADD_LANE)
                            sp_next.write(cbase + (bit<32>)meta.child, hdr.agg.next_block);
                            sp_exp_next.write(cbase + (bit<32>)meta.child, hdr.agg.exp);
                            agg_stats.count(STAT_CONTRIB);
                            sp_done.read(done, r);
                            if (done == 1) {
                                /* a probe after completion: answered as a duplicate
                                 * (to its port, or up for the result), never multicast
                                 * again; the round's next and exponent stay what they
                                 * were (later announcements must not make a lagging
                                 * worker skip a round) */
                                sp_rnext.read(hdr.agg.next_block, r);
                                sp_exp.read(hdr.agg.exp, r);
                                meta.fin = fin;
                                meta.verdict = OUT_DUP;
                            } else {
                                // EXERCISE sparse-min-next BEGIN hint: start from n = AGG_NEXT_NONE, e = 0 and fold every child in with AGG_FOR_EACH_CHILD(SP_MIN_CHILD)
                                n = AGG_NEXT_NONE;
                                e = 0;
                                AGG_FOR_EACH_CHILD(SP_MIN_CHILD)
                                // EXERCISE END
                                if (hdr.agg.block < n) {
                                    hdr.agg.next_block = n;
                                    hdr.agg.exp = e;
                                    sp_rnext.write(r, n);
                                    sp_exp.write(r, e);
                                    sp_done.write(r, 1);
                                    sp_final.write(r, FINAL_AT_ROOT);
                                    meta.verdict = OUT_DONE;
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

/* A dense round completed here (meta.verdict OUT_DONE from aggregate.p4): re-arm
 * the slot's sparse state, as a register reset leaves it.  Why here: every sparse
 * allreduce starts each slot with a dense lead round (hosts/sparse_agent.py), and a
 * dense round completes at a switch only once all its children sent it, so every
 * worker below is past any earlier call on this slot and no held sparse round is
 * needed any more; the sparse rounds of the new call come only after the lead
 * result.  Without it the previous call's announcements (sp_next = AGG_NEXT_NONE)
 * would complete the new call's first round with one contribution, and its held
 * rounds (larger sp_block) would make the new call's packets look stale.  Cleared:
 * what a new round reads before writing it (both versions' block, bitmap, ack,
 * done, final; every child's next: 0 holds the min down until each announced),
 * except that a sparse lead (AGG_FLAG_LEAD) keeps the children's next: its
 * packets registered every child's first block (aggregate.p4). */
#define SP_REARM_CHILD(i) sp_next.write(cbase + i, 0);

control SparseRearm(inout headers_t hdr, inout meta_t meta,
                    inout standard_metadata_t standard_metadata) {
    bit<32> cbase;

    apply {
        cbase = meta.slot_idx * AGG_MAX_WORKERS;
        @atomic {
            sp_block.write(meta.r, 0);
            sp_block.write(meta.o, 0);
            sp_bitmap.write(meta.r, 0);
            sp_bitmap.write(meta.o, 0);
            sp_ack.write(meta.r, 0);
            sp_ack.write(meta.o, 0);
            sp_done.write(meta.r, 0);
            sp_done.write(meta.o, 0);
            sp_final.write(meta.r, 0);
            sp_final.write(meta.o, 0);
            if ((hdr.agg.flags & AGG_FLAG_LEAD) == 0) {
                /* a sparse lead registered every child's first block instead */
                AGG_FOR_EACH_CHILD(SP_REARM_CHILD)
            }
        }
    }
}

#endif
