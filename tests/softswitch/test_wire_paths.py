"""Checksums, the drop simulator's statistics and untouched fields on the software switch.

Why beyond the vectors: the vectors show fixed headers; here random headers
prove the recomputed IPv4 checksum always verifies and equals an independent
computation, and the drop simulator is shown to hit its rate and to repeat
exactly under the same seed (what makes lossy experiments reproducible).
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from agglab.softswitch.pipeline import Pipeline
from agglab.testkit.frames import build, checksum16

ips = st.tuples(*[st.integers(0, 255)] * 4).map(lambda t: ".".join(map(str, t)))


@settings(max_examples=200, deadline=None)
@given(src=ips, dst=ips, ttl=st.integers(0, 255), ident=st.integers(0, 0xFFFF),
       tos=st.integers(0, 255), flags=st.integers(0, 7), frag=st.integers(0, 0x1FFF),
       csum=st.integers(0, 0xFFFF), payload=st.binary(max_size=40))
def test_forwarded_ipv4_checksum_verifies(src, dst, ttl, ident, tos, flags, frag, csum, payload):
    p = Pipeline(seed=0)
    p.command("table_add ipv4_lpm ipv4_forward 0.0.0.0/0 => 02:00:00:00:00:09 3")
    spec = {"ip": {"src": src, "dst": dst, "ttl": ttl, "id": ident, "tos": tos, "flags": flags,
                   "frag": frag, "checksum": csum, "proto": 6}, "payload": payload.hex(),
            "eth": {"src": "02:00:00:00:00:01", "dst": "02:00:00:00:00:02"}}
    (port, out), = p.process(1, build(spec))
    ip = {k: v for k, v in spec["ip"].items() if k != "checksum"}   # builder computes it
    expected = build({**spec, "ip": {**ip, "ttl": (ttl - 1) & 0xFF},
                      "eth": {**spec["eth"], "dst": "02:00:00:00:00:09"}})
    assert port == 3
    assert out == expected
    assert checksum16(out[14:34]) == 0                       # a valid header sums to 0xFFFF


def _lossy(seed: int, rate: float, n: int = 20000) -> list[bool]:
    p = Pipeline(seed=seed)
    p.command("table_add l2_exact l2_forward 02:00:00:00:00:02 => 2")
    p.command(f"table_add drop_sim set_drop_rate 1 => {min(round(rate * 2**32), 0xFFFFFFFF)}")
    frame = build({"eth": {"dst": "02:00:00:00:00:02", "src": "02:00:00:00:00:01", "type": 0x88B5}})
    return [not p.process(1, frame) for _ in range(n)]


def test_drop_rate_matches_threshold_and_seed_repeats():
    drops = _lossy(7, 0.25)
    assert abs(sum(drops) / len(drops) - 0.25) < 0.015
    assert _lossy(7, 0.25) == drops
    assert _lossy(8, 0.25) != drops
    assert not any(_lossy(1, 0.0, 2000)) and all(_lossy(1, 1.0, 2000))


def test_sim_drops_counted_on_both_sides():
    p = Pipeline(seed=0)
    p.command("table_add l2_exact l2_forward 02:00:00:00:00:02 => 2")
    p.command("table_add drop_sim_egress set_drop_rate 2 => 0xFFFFFFFF")
    frame = build({"eth": {"dst": "02:00:00:00:00:02", "src": "02:00:00:00:00:01", "type": 0x88B5}})
    assert p.process(1, frame) == []
    p.command("table_add drop_sim set_drop_rate 1 => 0xFFFFFFFF")
    assert p.process(1, frame) == []
    assert p.counters["agg_stats"][5] == 2
