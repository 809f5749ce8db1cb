/* Forwarding of everything that is not aggregation traffic: IPv4 by longest
 * prefix (hosts' ordinary traffic, baselines such as ring allreduce), the
 * rest (ARP) by destination MAC with flooding for broadcast.
 */
#ifndef AGGLAB_FORWARD_P4
#define AGGLAB_FORWARD_P4

control Forward(inout headers_t hdr, inout meta_t meta,
                inout standard_metadata_t standard_metadata) {
    @name(".drop")
    action drop() { mark_to_drop(standard_metadata); }

    /* Only the destination MAC is rewritten: hosts talk to each other
     * directly (no router MAC), so the source MAC stays the sender's. */
    @name(".ipv4_forward")
    action ipv4_forward(mac_t dmac, port_t port) {
        hdr.ethernet.dstAddr = dmac;
        standard_metadata.egress_spec = port;
        hdr.ipv4.ttl = hdr.ipv4.ttl - 1;
    }

    @name(".ipv4_lpm")
    table ipv4_lpm {
        key = { hdr.ipv4.dstAddr: lpm; }
        actions = { ipv4_forward; drop; }
        default_action = drop();
        size = 1024;
    }

    @name(".l2_forward")
    action l2_forward(port_t port) { standard_metadata.egress_spec = port; }

    /* is_flood tells egress to prune the copy going back out of the
     * ingress port; aggregate multicasts must keep that copy. */
    @name(".l2_flood")
    action l2_flood(bit<16> mgrp) {
        standard_metadata.mcast_grp = mgrp;
        meta.is_flood = 1;
    }

    @name(".l2_exact")
    table l2_exact {
        key = { hdr.ethernet.dstAddr: exact; }
        actions = { l2_forward; l2_flood; drop; }
        default_action = drop();
        size = 1024;
    }

    apply {
        if (hdr.ipv4.isValid()) {
            /* IP options: the deparser only recomputes 20-byte headers, so
             * forwarding them would emit a wrong checksum. */
            if (hdr.ipv4.ihl == 5) {
                ipv4_lpm.apply();
            } else {
                drop();
            }
        } else {
            l2_exact.apply();
        }
    }
}

/* Egress half of a scheme's multicast to hosts (atp.p4's result at the PS's ToR): each
 * replica's rid names the host it is for, whose addresses it takes; it then travels by
 * the switches' ordinary routes. A replica whose rid has no entry is dropped. */
control CopyDst(inout headers_t hdr, inout meta_t meta,
                inout standard_metadata_t standard_metadata) {
    @name(".copy_set_dst")
    action copy_set_dst(mac_t dmac, ip4_t dip) {
        hdr.ethernet.dstAddr = dmac;
        hdr.ipv4.dstAddr = dip;
    }

    @name(".drop")
    action drop() { mark_to_drop(standard_metadata); }

    @name(".copy_dst")
    table copy_dst {
        key = { standard_metadata.egress_rid: exact; }
        actions = { copy_set_dst; drop; }
        default_action = drop();
        size = 1024;
    }

    apply { copy_dst.apply(); }
}

/* Egress half of flooding: never send a flooded frame back where it came from. */
control FloodPrune(inout headers_t hdr, inout meta_t meta,
                   inout standard_metadata_t standard_metadata) {
    apply {
        if (meta.is_flood == 1 &&
            standard_metadata.egress_port == standard_metadata.ingress_port) {
            mark_to_drop(standard_metadata);
        }
    }
}

#endif
