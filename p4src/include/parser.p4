/* Parser: ethernet -> ipv4 -> udp -> agg_h + agg_data_h.
 *
 * Only IHL 5 goes past IPv4: the aggregation path, the software switch and
 * the host agents all rely on the fixed offset of agg_h (wire.AGG_OFFSET).
 * Packets with IP options stop after ipv4 and are dropped by forward.p4.
 *
 * v1model parsers do not drop on error: a short packet reaches ingress with
 * standard_metadata.parser_error set, and ingress drops it (STAT_REJECT)
 * before any state is touched.
 */
#ifndef AGGLAB_PARSER_P4
#define AGGLAB_PARSER_P4

parser AgglabParser(packet_in pkt, out headers_t hdr, inout meta_t meta,
                    inout standard_metadata_t standard_metadata) {
    state start {
        pkt.extract(hdr.ethernet);
        transition select(hdr.ethernet.etherType) {
            ETHERTYPE_IPV4: parse_ipv4;
            default: accept;
        }
    }

    state parse_ipv4 {
        pkt.extract(hdr.ipv4);
        transition select(hdr.ipv4.ihl, hdr.ipv4.protocol) {
            (4w5, IPPROTO_UDP): parse_udp;
            default: accept;
        }
    }

    state parse_udp {
        pkt.extract(hdr.udp);
        transition select(hdr.udp.dstPort) {
            AGG_UDP_PORT: parse_agg;
            default: accept;
        }
    }

    /* Both headers or an error: an agg packet without its K values must
     * never reach the registers.  The one exception is a sparse
     * acknowledgement (flags SPARSE and ACK both set): header only, its
     * data header stays invalid and sparse.p4 never reads it. */
    state parse_agg {
        pkt.extract(hdr.agg);
        transition select(hdr.agg.flags[3:2]) {
            2w3: accept;                 /* AGG_FLAG_ACK | AGG_FLAG_SPARSE */
            default: parse_agg_data;
        }
    }

    state parse_agg_data {
        pkt.extract(hdr.data);
        transition accept;
    }
}

#endif
