/* Drop simulator: per-port random loss, to exercise the loss-recovery paths
 * of the protocols (SwitchML retransmission, shadow copies) on demand.
 *
 * drop when random(0, 0xFFFFFFFE) < threshold, so threshold 0 never drops
 * and 0xFFFFFFFF always drops.  The upper bound stays below 2^32 - 1 because
 * BMv2 computes hi - lo + 1 in 32 bits.  Loss on ingress models the link
 * into the switch, loss on egress the link out of it.
 */
#ifndef AGGLAB_DROP_SIM_P4
#define AGGLAB_DROP_SIM_P4

control DropSimIngress(inout headers_t hdr, inout meta_t meta,
                       inout standard_metadata_t standard_metadata) {
    @name(".set_drop_rate")
    action set_drop_rate(bit<32> threshold) { meta.drop_threshold = threshold; }

    @name(".drop_sim")
    table drop_sim {
        key = { standard_metadata.ingress_port: exact; }
        actions = { set_drop_rate; NoAction; }
        default_action = NoAction();
        size = 512;
    }

    apply {
        meta.sim_drop = 0;
        switch (drop_sim.apply().action_run) {
            set_drop_rate: {
                random(meta.rnd, 32w0, 32w0xFFFFFFFE);
                if (meta.rnd < meta.drop_threshold) {
                    meta.sim_drop = 1;
                    mark_to_drop(standard_metadata);
                    agg_stats.count(STAT_SIM_DROP);
                }
            }
        }
    }
}

control DropSimEgress(inout headers_t hdr, inout meta_t meta,
                      inout standard_metadata_t standard_metadata) {
    @name(".set_drop_rate")
    action set_drop_rate(bit<32> threshold) { meta.drop_threshold = threshold; }

    @name(".drop_sim_egress")
    table drop_sim_egress {
        key = { standard_metadata.egress_port: exact; }
        actions = { set_drop_rate; NoAction; }
        default_action = NoAction();
        size = 512;
    }

    apply {
        meta.sim_drop = 0;
        switch (drop_sim_egress.apply().action_run) {
            set_drop_rate: {
                random(meta.rnd, 32w0, 32w0xFFFFFFFE);
                if (meta.rnd < meta.drop_threshold) {
                    meta.sim_drop = 1;
                    mark_to_drop(standard_metadata);
                    agg_stats.count(STAT_SIM_DROP);
                }
            }
        }
    }
}

#endif
