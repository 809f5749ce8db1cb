/* Packet headers. The aggregation header agg_h below is parsed by
 * agglab/wire.py to build the Python struct layout and the scapy layer, so
 * keep each field on its own line as `bit<N> name;`.
 */
#ifndef AGGLAB_HEADERS_P4
#define AGGLAB_HEADERS_P4

#include "constants.p4"

typedef bit<9>  port_t;
typedef bit<48> mac_t;
typedef bit<32> ip4_t;

const bit<16> ETHERTYPE_IPV4 = 0x0800;
const bit<8>  IPPROTO_UDP    = 17;

header ethernet_h {
    mac_t   dstAddr;
    mac_t   srcAddr;
    bit<16> etherType;
}

header ipv4_h {
    bit<4>  version;
    bit<4>  ihl;
    bit<8>  diffserv;
    bit<16> totalLen;
    bit<16> identification;
    bit<3>  flags;
    bit<13> fragOffset;
    bit<8>  ttl;
    bit<8>  protocol;
    bit<16> hdrChecksum;
    ip4_t   srcAddr;
    ip4_t   dstAddr;
}

header udp_h {
    bit<16> srcPort;
    bit<16> dstPort;
    bit<16> length;
    bit<16> checksum;
}

/* Aggregation header (16 bytes), followed by agg_data_h (AGG_K x int32). */
header agg_h {
    bit<8>  job;         /* job (tenant) id                                  */
    bit<8>  tree;        /* aggregation tree of the job                      */
    bit<8>  epoch;       /* tree installation epoch; stale epochs miss       */
    bit<8>  flags;       /* AGG_FLAG_RESULT | AGG_FLAG_RETX                   */
    bit<1>  ver;         /* slot version (two per slot: shadow copy)         */
    bit<15> slot;        /* slot index within the job's window               */
    bit<8>  worker;      /* sender's child index (informational)             */
    bit<8>  exp;         /* biased exponent of the sender's NEXT block       */
    bit<32> block;       /* block offset (in units of AGG_K values)          */
    bit<32> next_block;  /* sparse pipeline: sender's next non-zero block    */
}

#include "values.p4"

struct headers_t {
    ethernet_h ethernet;
    ipv4_h     ipv4;
    udp_h      udp;
    agg_h      agg;
    agg_data_h data;
}

#endif
