"""tools/wireshark/agglab.lua: up to date with headers.p4, and tshark decodes every field."""

from __future__ import annotations

import shutil
import subprocess

import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether
from scapy.utils import wrpcap

from agglab import dissector
from agglab.ground import wire

FIELDS = ["agglab.job", "agglab.tree", "agglab.epoch", "agglab.flags.result", "agglab.flags.ack",
          "agglab.ver", "agglab.slot", "agglab.worker", "agglab.exp", "agglab.block", "agglab.next_block",
          "agglab.value"]


def test_committed_dissector_is_up_to_date():
    assert dissector.TARGET.read_text() == dissector.render(), "run `python -m agglab.dissector`"


def _frame(header: dict, values: list[int]) -> Ether:
    payload = wire.pack_agg(**header) + b"".join(v.to_bytes(4, "big", signed=True) for v in values)
    return (Ether(src="02:00:00:00:00:01", dst="02:a6:67:ff:ff:fe") / IP(src="10.0.0.1", dst="10.255.255.254")
            / UDP(sport=40000, dport=wire.UDP_PORT) / payload)


@pytest.mark.skipif(shutil.which("tshark") is None, reason="needs Debian's tshark (scripts/install-system.sh)")
def test_tshark_decodes_every_field(tmp_path):
    values = [(-1) ** i * (i * 1_000_003) for i in range(wire.K)]
    packets = [
        dict(job=3, tree=1, epoch=7, flags=wire.FLAG_RESULT, ver=1, slot=1023, worker=5, exp=129,
             block=4_000_000_000, next_block=12),
        dict(job=0, tree=0, epoch=255, flags=wire.CONST["AGG_FLAG_ACK"], ver=0, slot=0, worker=31, exp=0,
             block=0),
    ]
    pcap = tmp_path / "agg.pcap"
    wrpcap(str(pcap), [_frame(packets[0], values), _frame(packets[1], [])])
    out = subprocess.run(
        ["tshark", "-X", f"lua_script:{dissector.TARGET}", "-r", str(pcap), "-T", "fields", "-E", "separator=|",
         *sum((["-e", f] for f in FIELDS), [])],
        capture_output=True, text=True, timeout=120, check=True).stdout.splitlines()
    rows = [dict(zip(FIELDS, line.split("|"))) for line in out]
    assert len(rows) == 2
    first, second = rows
    assert (first["agglab.job"], first["agglab.tree"], first["agglab.epoch"]) == ("3", "1", "7")
    assert (first["agglab.ver"], first["agglab.slot"], first["agglab.worker"], first["agglab.exp"]) == ("1", "1023", "5", "129")
    assert first["agglab.block"] == "4000000000" and int(first["agglab.next_block"], 16) == 12
    assert first["agglab.flags.result"] in ("1", "True") and first["agglab.flags.ack"] in ("0", "False")
    assert [int(v) for v in first["agglab.value"].split(",")] == values
    assert second["agglab.epoch"] == "255" and second["agglab.worker"] == "31"
    assert second["agglab.flags.ack"] in ("1", "True") and int(second["agglab.next_block"], 16) == wire.NEXT_NONE
    assert second["agglab.value"] == ""
