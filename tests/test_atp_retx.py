"""A resend inside a switch's partial sum reaches the worker as a resend (RETX), whichever
packet completed the sum: scripted frames through the twin's ATP control
(softswitch/schemes/atp.py, atp.p4's mirror) into the PS (hosts/schemes/atp.py).

Why: the workers time only answers no resend is in (Karn, hosts/schemes/atp.py `work`). A sum
that took the flags of the partner's first send that completed it came back unmarked, and
the worker that had resent into it timed its own loss recovery from its first send: its
SRTT grew past the estimate's cap, the shared RTO backed off (hosts/rto.py) and its last
blocks' resends went out seconds apart (2026-12-07, ninth session, docs/measurements.md).
The conformance vector p4src/vectors/atp_retx_sum.yaml holds the switch's side on BMv2 too."""

from __future__ import annotations

import random
import socket
import threading

import numpy as np

from agglab.ground import wire
from agglab.hosts.protocol import decode
from agglab.hosts.schemes import atp
from agglab.softswitch.pipeline import Pipeline
from agglab.testkit.frames import build

K = wire.K
JOB = 1


def _tor(ps_ip: str) -> Pipeline:
    """A ToR that aggregates ranks 1, 2 and 3 of job 1 and routes the PS out of port 4."""
    p = Pipeline(seed=1)
    for line in (f"table_add ipv4_lpm ipv4_forward {ps_ip}/32 => 02:00:00:00:00:04 4",
                 f"table_add atp_job atp_aggregate {JOB} => 14"):
        p.command(line)
    return p


def _contribution(rank: int, block: int, fill: int, ps_ip: str, resend: bool) -> bytes:
    flags = atp.FLAG_ATP | (atp.RETX if resend else 0)
    return build({"from": f"h{rank}", "ip": {"dst": ps_ip},
                  "agg": {"job": JOB, "worker": rank, "block": block, "next_block": 1 << rank, "flags": flags},
                  "values": {"fill": fill}})


def _through_tor(tor: Pipeline, block: int, resent_rank: int | None, ps_ip: str) -> bytes:
    """Ranks 1, 2, 3 in that order (rank 1 claims, rank 3 completes): the sum's UDP payload."""
    out = []
    for rank in (1, 2, 3):
        out = tor.process(rank, _contribution(rank, block, rank, ps_ip, resend=rank == resent_rank))
    assert len(out) == 1, out                                  # absorbed twice, then the sum
    port, frame = out[0][0], bytes(out[0][1])
    assert port == 4
    return frame[wire.AGG_OFFSET:]


def test_a_sum_a_partners_first_send_completed_still_says_it_holds_a_resend():
    base = random.randrange(2, 200)
    peers = [f"127.0.{base}.{r + 1}" for r in range(4)]
    tor = _tor(peers[0])
    marked = _through_tor(tor, 0, resent_rank=2, ps_ip=peers[0])       # rank 2 resent into block 0
    clean = _through_tor(tor, 1, resent_rank=None, ps_ip=peers[0])     # block 1: nobody resent
    hdr, vals = decode(marked)
    assert hdr["next_block"] == 0b1110 and (vals == 1 + 2 + 3).all()   # the whole rack's sum
    assert hdr["worker"] == 3 and hdr["flags"] & atp.RETX             # rank 3 completed it, marked
    assert not decode(clean)[0]["flags"] & atp.RETX

    ps = atp.AtpEndpoint(peers[0], peers, 0, job=JOB)
    rank1 = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    rank1.bind((peers[1], wire.UDP_PORT))
    rank1.settimeout(10.0)
    served: dict = {}
    t = threading.Thread(target=lambda: served.update(out=ps.serve(np.full((2, K), 10, np.int32), 4, give_up=10.0)))
    t.start()
    try:
        for payload in (marked, clean):
            rank1.sendto(payload, (peers[0], wire.UDP_PORT))
        answers = {}
        for _ in range(2):
            h, v = decode(rank1.recv(2048))
            answers[h["block"]] = (h["flags"], v)
        t.join(10)
        assert not t.is_alive() and "out" in served
        flags0, v0 = answers[0]
        flags1, v1 = answers[1]
        assert flags0 & atp.RESULT and (v0 == 16).all() and (v1 == 16).all()
        assert flags0 & atp.RETX                       # rank 2 does not time it from its first send
        assert not flags1 & atp.RETX                   # a clean sum's answer is timed
    finally:
        rank1.close()
        ps._stop_linger()
        ps.close()
