"""Random packet sequences for the differential tests (Hypothesis strategies).

Why generated sequences on top of the hand-written vectors: a vector checks the cases its
author thought of; the twin (softswitch/) and BMv2 must agree on *every* sequence, including
the orders nobody writes down (a duplicate after a new round, a result from the parent for a
slot another version holds, a resend that collides with another job's aggregator). So a
sequence is a fixed switch configuration (the CLI lines of one of SCENARIOS: a tree's root or
an inner switch, both with an ATP job and IPv4 routes) and a list of frames in the vector
format's frame specs (agglab/testkit/frames.py), drawn per scheme:

- dense:   SwitchML contributions; valid ones, duplicates, resends, other versions, slots
           outside the job's window, wrong job/tree/epoch, spoofed ranks, results from the parent
- sparse:  the same with AGG_FLAG_SPARSE: blocks, next_block, ACKs (agg_h only), LEAD
- atp:     ATP packets (AGG_FLAG_ATP) to the PS: claims, collisions, overlaps, resends, and
           results to every worker (job 2's entry multicasts them, as at the PS's ToR)
- hostile: any of those with flags drawn at random, lengths and fields forged, frames
           truncated, IP options, and packets that are not aggregation at all

The small domains (a few slots, two versions, blocks 0-3, 3 children) are on purpose: they make
random sequences meet in the same registers, where the interesting states are. Needs the
`test` extra (Hypothesis); nothing in the agglab command imports this module.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hypothesis import strategies as st

from agglab.testkit import layout

RESULT, RETX, SPARSE, ACK, LEAD, ATP = 1, 2, 4, 8, 16, 32
NEXT_NONE = 0xFFFFFFFF
ETH = 14                           # a packet socket sends no frame shorter than its Ethernet header
PORTS = (1, 2, 3, 4)               # switch ports the scenarios use: 1-3 workers, 4 parent / PS
_REPLY = [f"table_add agg_reply agg_set_dst {p} => 02:a6:67:ff:ff:fe 10.255.255.254 02:00:00:00:00:0{p} 10.0.0.{p}"
          for p in (1, 2, 3)]
_COMMON = ["mc_mgrp_create 1", "mc_node_create 0 1 2 3", "mc_node_associate 1 0",
           "table_add ipv4_lpm ipv4_forward 10.0.0.4/32 => 02:00:00:00:00:04 4",
           "table_add ipv4_lpm ipv4_forward 10.0.0.1/32 => 02:00:00:00:00:01 1",
           "table_add atp_job atp_aggregate 1 => 14",            # ranks 1, 2, 3
           "table_add atp_job atp_aggregate_mcast 2 => 6 3",     # ranks 1, 2; the PS's ToR: results to all
           "mc_mgrp_create 3", "mc_node_create 513 1", "mc_node_associate 3 1",
           "mc_node_create 514 2", "mc_node_associate 3 2",
           "table_add copy_dst copy_set_dst 513 => 02:00:00:00:00:01 10.0.0.1",
           "table_add copy_dst copy_set_dst 514 => 02:00:00:00:00:02 10.0.0.2",
           *_REPLY]
# job 1: children on ports 1-3 (port 1 may speak for any rank, 2 and 3 only for their own),
# slots 0-3 of the switch; job 2: one child on port 4, slots 4-5
SCENARIOS: dict[str, list[str]] = {
    "root": _COMMON + [
        "table_add agg_job agg_child 1 0 0 1 => 0 3 1 0 4 65535",
        "table_add agg_job agg_child 1 0 0 2 => 1 3 1 0 4 1",
        "table_add agg_job agg_child 1 0 0 3 => 2 3 1 0 4 2",
        "table_add agg_job agg_child 2 0 0 4 => 0 1 1 4 2 65535"],
    "inner": _COMMON + [
        "table_add agg_job agg_child_of 1 0 0 1 => 0 3 1 0 4 65535 4",
        "table_add agg_job agg_child_of 1 0 0 2 => 1 3 1 0 4 1 4",
        "table_add agg_job agg_child_of 1 0 0 3 => 2 3 1 0 4 2 4",
        "table_add agg_job agg_from_parent 1 0 0 4 => 3 1 0 4"],
}


@dataclass
class Sequence:
    """One generated case: a scenario's CLI lines and (port, frame spec) pairs."""
    scheme: str
    scenario: str
    packets: list[tuple[int, dict]] = field(default_factory=list)

    @property
    def commands(self) -> list[str]:
        return list(SCENARIOS[self.scenario])


_INT32 = st.one_of(st.integers(-5, 5), st.sampled_from([2**31 - 1, -2**31, 2**30, -2**30, 65535]),
                   st.integers(-2**31, 2**31 - 1))
_VALUES = st.lists(_INT32, min_size=1, max_size=4)
_EXP = st.sampled_from([0, 120, 128, 130, 140, 255])


def _sender(port: int) -> str:
    return "service" if port == 4 else f"h{port}"


@st.composite
def _agg_packet(draw, scheme: str, scenario: str) -> tuple[int, dict]:
    """A dense or sparse packet, mostly what a worker (or the parent) would send."""
    port = draw(st.sampled_from(PORTS))
    from_parent = port == 4 and scenario == "inner"
    rank = {1: 0, 2: 1, 3: 2, 4: 0}[port]
    worker = draw(st.one_of(st.just(rank), st.integers(0, 3), st.just(40))) if draw(st.booleans()) else rank
    job = draw(st.sampled_from([1] * 6 + [2, 3])) if port != 4 or from_parent else draw(st.sampled_from([2, 2, 1]))
    flags = SPARSE if scheme == "sparse" else 0
    if from_parent and draw(st.integers(0, 3)):
        flags |= RESULT
    flags |= draw(st.sampled_from([0, 0, 0, RETX, RESULT, LEAD] + ([ACK, ACK | LEAD] if scheme == "sparse" else [])))
    agg = {"job": job, "tree": draw(st.sampled_from([0] * 6 + [1])), "epoch": draw(st.sampled_from([0] * 6 + [2])),
           "flags": flags, "ver": draw(st.integers(0, 1)), "slot": draw(st.sampled_from([0, 1, 1, 2, 3, 4, 5, 9])),
           "worker": worker, "exp": draw(_EXP), "block": draw(st.integers(0, 3)),
           "next_block": draw(st.one_of(st.integers(0, 6), st.just(NEXT_NONE)))}
    spec = {"from": _sender(port), "agg": agg}
    if from_parent:
        spec = {"to": "service", "agg": agg}
    spec["values"] = None if flags & ACK and scheme == "sparse" else draw(_VALUES)
    return port, spec


@st.composite
def _atp_packet(draw) -> tuple[int, dict]:
    """An ATP packet on its way to the PS (h4): ranks 1-3 on ports 1-3."""
    port = draw(st.sampled_from((1, 2, 3, 3, 4)))
    rank = draw(st.integers(1, 3)) if draw(st.integers(0, 4)) == 0 else min(port, 3)
    flags = ATP | draw(st.sampled_from([0, 0, 0, RETX, RESULT, SPARSE]))
    if flags & RESULT and draw(st.booleans()):
        rank = 255                                          # the PS's one copy for every worker (ATP_TO_ALL)
    agg = {"job": draw(st.sampled_from([1, 1, 2, 9])), "worker": rank, "flags": flags,
           "block": draw(st.sampled_from([0, 1, 2, 5, 110])), "next_block": draw(st.integers(0, 15)),
           "exp": draw(_EXP), "slot": draw(st.integers(0, 2))}
    return port, {"from": f"h{port}", "ip": {"dst": "10.0.0.4"}, "agg": agg, "values": draw(_VALUES)}


@st.composite
def _hostile(draw, scenario: str) -> tuple[int, dict]:
    """A packet of any scheme with something forged: flags, lengths, headers or bytes."""
    port, spec = draw(st.one_of(_agg_packet("dense", scenario), _agg_packet("sparse", scenario), _atp_packet()))
    how = draw(st.sampled_from(["flags", "flags", "ip_len", "udp_len", "truncate", "options", "dport", "ttl",
                                "version", "raw", "plain_ip", "arp"]))
    if how == "flags":
        spec["agg"]["flags"] = draw(st.integers(0, 255))
        if spec["agg"]["flags"] & (ACK | SPARSE) == ACK | SPARSE and draw(st.booleans()):
            spec["values"] = None
    elif how == "ip_len":
        spec["ip"] = {**spec.get("ip", {}), "len": draw(st.sampled_from([20, 44, 300, 1000, 65535]))}
    elif how == "udp_len":
        spec["udp"] = {"len": draw(st.sampled_from([0, 8, 24, 100, 280, 65535]))}
    elif how == "truncate":
        spec["truncate"] = draw(st.integers(ETH, layout.frame_bytes()))
    elif how == "options":
        spec["ip"] = {**spec.get("ip", {}), "options": "01010101"}
    elif how == "dport":
        spec["udp"] = {"dport": draw(st.sampled_from([9, layout.UDP_PORT + 1]))}
    elif how == "ttl":
        spec["ip"] = {**spec.get("ip", {}), "ttl": draw(st.sampled_from([0, 1]))}
    elif how == "version":
        spec["ip"] = {**spec.get("ip", {}), "ihl": draw(st.sampled_from([4, 6, 15]))}
    elif how == "raw":
        spec = {"raw": draw(st.binary(min_size=ETH, max_size=80)).hex()}
    elif how == "plain_ip":
        spec = {"from": f"h{port}", "ip": {"dst": draw(st.sampled_from(["10.0.0.4", "10.0.0.1", "10.9.9.9"])),
                                           "proto": draw(st.sampled_from([6, 17]))}, "payload": "00112233"}
    else:
        spec = {"from": f"h{port}", "eth": {"dst": draw(st.sampled_from(["ff:ff:ff:ff:ff:ff", "02:00:00:00:00:04"]))},
                "arp": {"tpa": "10.0.0.4"}}
    return port, spec


def _next(draw, scheme: str, block: int) -> int:
    if scheme != "sparse":
        return draw(st.integers(0, 6))
    what = draw(st.integers(0, 5))           # mostly a later block, so that rounds complete
    return draw(st.integers(0, block)) if what == 0 else NEXT_NONE if what == 1 else \
        draw(st.integers(block + 1, block + 3))


@st.composite
def _round(draw, scheme: str, scenario: str) -> list[tuple[int, dict]]:
    """A round of job 1 as its workers send it: one slot version and block, the children
    (ports 1-3, their own ranks) in any order, not always all of them; at an inner switch
    sometimes the parent's result after it."""
    slot, ver, block = draw(st.integers(0, 3)), draw(st.integers(0, 1)), draw(st.integers(0, 3))
    ports = draw(st.permutations([1, 2, 3]))[:draw(st.sampled_from([3, 3, 3, 2, 1]))]
    flags = SPARSE if scheme == "sparse" else 0
    out = []
    for port in ports:
        ack = scheme == "sparse" and draw(st.integers(0, 5)) == 0
        agg = {"job": 1, "slot": slot, "ver": ver, "worker": port - 1, "exp": draw(_EXP), "block": block,
               "next_block": _next(draw, scheme, block), "flags": flags | (ACK if ack else 0)}
        out.append((port, {"from": f"h{port}", "agg": agg, "values": None if ack else draw(_VALUES)}))
    if scenario == "inner" and draw(st.booleans()):
        agg = {"job": 1, "slot": slot, "ver": ver, "worker": 0, "exp": draw(_EXP), "block": block,
               "next_block": _next(draw, scheme, block), "flags": flags | RESULT}
        out.append((4, {"to": "service", "agg": agg, "values": draw(_VALUES)}))
    return out


def packet(scheme: str, scenario: str):
    if scheme == "atp":
        return _atp_packet()
    if scheme == "hostile":
        return st.one_of(_hostile(scenario), _agg_packet("dense", scenario), _agg_packet("sparse", scenario))
    return _agg_packet(scheme, scenario)


@st.composite
def sequences(draw, scheme: str, max_packets: int = 10) -> Sequence:
    """A sequence of one scheme: rounds (every child's packet for one slot version, in any
    order), single packets, and copies of earlier ones (duplicates, resends); Hypothesis'
    own choice of order makes the reorderings."""
    scenario = "root" if scheme == "atp" else draw(st.sampled_from(["root", "root", "inner"]))
    n = draw(st.integers(1, max_packets))
    packets: list[tuple[int, dict]] = []
    while len(packets) < n:
        what = draw(st.integers(0, 5))
        if packets and what == 0:
            packets.append(draw(st.sampled_from(packets)))
        elif what <= 2 and scheme != "atp":
            packets += draw(_round("sparse" if scheme == "sparse" else "dense", scenario))
        else:
            packets.append(draw(packet(scheme, scenario)))
    return Sequence(scheme, scenario, packets[:max_packets])


SCHEMES = ("dense", "sparse", "atp", "hostile")
