/* agglab: in-network aggregation (SwitchML semantics, OmniReduce-style
 * block-sparse aggregation for packets flagged AGG_FLAG_SPARSE, ATP-style best effort in a
 * shared pool for packets flagged AGG_FLAG_ATP) plus plain forwarding,
 * for BMv2 simple_switch.  The software switch (softswitch/) runs the same
 * pipeline with the same names; docs/design/ is the contract for both.
 */
#include <core.p4>
#include <v1model.p4>

#include "include/headers.p4"

/* Per-packet scratch state shared by the controls below.  Multicast
 * replicas inherit it, which is how egress knows result from flood. */
struct meta_t {
    bit<32> drop_threshold;
    bit<32> rnd;
    bit<1>  sim_drop;
    bit<1>  is_result;  /* emitted aggregate: egress applies agg_reply */
    bit<1>  is_flood;   /* l2 flood replica: pruned on its ingress port */
    bit<2>  role;       /* agg_job's answer (ROLE_*), see job.p4 */
    bit<8>  child;
    bit<8>  fan_in;
    bit<16> mgrp;
    bit<16> slot_base;
    bit<16> slots;      /* the job's slot range: slot_base .. slot_base + slots - 1 */
    bit<16> worker;     /* worker field a packet on this port must carry (AGG_ANY_WORKER: any) */
    bit<9>  parent_port;
    bit<32> slot_idx;   /* slot_base + slot                          */
    bit<32> r;          /* register index of this slot-version       */
    bit<32> o;          /* ... and of the other version of the slot  */
    bit<3>  verdict;    /* the pipeline's verdict for AggOut (OUT_*) */
    bit<8>  fin;        /* OUT_DUP: the stored sum is the tree's result */
    bit<32> color;      /* port_meter's colour for a policed port (policer.p4) */
    bit<1>  policed;    /* red: dropped before anything else */
    bit<1>  is_copy;    /* a scheme's multicast to hosts: egress applies copy_dst (forward.p4) */
    bit<1>  absorbed;   /* a scheme with a table of its own (atp.p4): the packet stays in an aggregator (else forwarded) */
}

#include "include/parser.p4"
#include "include/job.p4"         /* agg_job, agg_stats, AggOut: both pipelines */
#include "include/policer.p4"     /* ports in no job, metered */
#include "include/schemes.p4"     /* GENERATED from ground/schemes.py's P4 rows (built, not committed):
                                     each scheme's control (aggregate.p4: dense, SwitchML; sparse.p4:
                                     AGG_FLAG_SPARSE, OmniReduce; atp.p4: AGG_FLAG_ATP, the shared pool)
                                     and the AGGLAB_* lines expanded in AgglabIngress */
#include "include/drop_sim.p4"
#include "include/forward.p4"
#include "include/deparser.p4"

control AgglabIngress(inout headers_t hdr, inout meta_t meta,
                      inout standard_metadata_t standard_metadata) {
    PortPolicer() policer;
    DropSimIngress() drop_sim_in;
    JobRole() job_role;
    SparseRearm() sparse_rearm;
    AggOut() agg_out;
    Forward() forward;
    AGGLAB_SCHEME_INSTANCES             /* each scheme's control: aggregate, sparse, atp, ... */

    apply {
        policer.apply(hdr, meta, standard_metadata);
        if (meta.policed == 0) {              /* a red frame from a port in no job: dropped */
            drop_sim_in.apply(hdr, meta, standard_metadata);
            if (meta.sim_drop == 0) {
                if (standard_metadata.parser_error != error.NoError) {
                    /* Truncated packets must not reach the registers. */
                    mark_to_drop(standard_metadata);
                    agg_stats.count(STAT_REJECT);
                    agg_rejects.count(REJ_MALFORMED);
                } else
                AGGLAB_OWN_TABLE_BRANCHES       /* per scheme with its own table: `if (its flag) {...} else` */
                if (hdr.agg.isValid()) {
                    job_role.apply(hdr, meta, standard_metadata);   /* one lookup for the rest */
                    if (meta.role != ROLE_NONE) {
                        AGGLAB_ROLE_BRANCHES    /* per flagged scheme on agg_job: `if (its flag) {...} else` */
                        {
                            aggregate.apply(hdr, meta, standard_metadata);   /* the dense default */
                            if (meta.verdict == OUT_DONE) {
                                /* a dense round (a sparse call's lead round) completed */
                                sparse_rearm.apply(hdr, meta, standard_metadata);
                            }
                        }
                        agg_out.apply(hdr, meta, standard_metadata);
                    }
                } else {
                    forward.apply(hdr, meta, standard_metadata);
                }
            }
        }
    }
}

control AgglabEgress(inout headers_t hdr, inout meta_t meta,
                     inout standard_metadata_t standard_metadata) {
    DropSimEgress() drop_sim_eg;
    AggregateEgress() aggregate_eg;
    FloodPrune() flood_prune;
    CopyDst() copy_dst;

    apply {
        drop_sim_eg.apply(hdr, meta, standard_metadata);
        if (meta.sim_drop == 0) {
            if (meta.is_result == 1) {
                aggregate_eg.apply(hdr, meta, standard_metadata);
            } else if (meta.is_copy == 1) {
                copy_dst.apply(hdr, meta, standard_metadata);
            } else {
                flood_prune.apply(hdr, meta, standard_metadata);
            }
        }
    }
}

V1Switch(AgglabParser(), AgglabVerifyChecksum(), AgglabIngress(),
         AgglabEgress(), AgglabComputeChecksum(), AgglabDeparser()) main;
