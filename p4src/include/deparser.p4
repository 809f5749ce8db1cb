/* Checksums and deparser.
 *
 * Inbound checksums are not verified (the hosts' kernels do that); the IPv4
 * checksum is recomputed for every emitted 20-byte header because TTL and
 * addresses change.  UDP checksums of results are zeroed in aggregate.p4
 * (0 = "not computed" for UDP over IPv4), which is cheaper than recomputing
 * over K values and exactly what the software switch emits.
 */
#ifndef AGGLAB_DEPARSER_P4
#define AGGLAB_DEPARSER_P4

control AgglabVerifyChecksum(inout headers_t hdr, inout meta_t meta) {
    apply { }
}

control AgglabComputeChecksum(inout headers_t hdr, inout meta_t meta) {
    apply {
        update_checksum(
            hdr.ipv4.isValid() && hdr.ipv4.ihl == 5,
            { hdr.ipv4.version, hdr.ipv4.ihl, hdr.ipv4.diffserv,
              hdr.ipv4.totalLen, hdr.ipv4.identification, hdr.ipv4.flags,
              hdr.ipv4.fragOffset, hdr.ipv4.ttl, hdr.ipv4.protocol,
              hdr.ipv4.srcAddr, hdr.ipv4.dstAddr },
            hdr.ipv4.hdrChecksum,
            HashAlgorithm.csum16);
    }
}

control AgglabDeparser(packet_out pkt, in headers_t hdr) {
    apply {
        pkt.emit(hdr.ethernet);
        pkt.emit(hdr.ipv4);
        pkt.emit(hdr.udp);
        pkt.emit(hdr.agg);
        pkt.emit(hdr.data);
    }
}

#endif
