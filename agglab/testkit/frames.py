"""Build frames from readable field dicts, and describe frames field by field.

Why a builder of our own (not scapy, not softswitch code, not agglab.ground.wire): the
vectors must state what the wire carries independently of either target and of
the packer they share, so the expected bytes come from here, with agg_h packed
by layout.py from the layout docs/design/ writes down, and both the software
switch and BMv2 are held to them.
Lengths and the IPv4 checksum are computed unless a vector pins them, which
is how a vector says "the switch recomputed the checksum" without hex.

A frame spec (all keys optional):
    from: h1 / to: h2     host aliases: hN = 02:00:00:00:00:NN, 10.0.0.N; "service"
    eth:  {dst, src, type}
    ip:   {src, dst, ttl, id, tos, flags, frag, proto, ihl, options (hex), len, checksum}
    udp:  {sport, dport, len, checksum}
    agg:  {job, tree, epoch, flags, ver, slot, worker, exp, block, next_block}
    values: [int32, ...] (zero-padded to K) | {fill: v} | {start: a, step: b} | null (agg_h only)
    arp:  {op, sha, spa, tha, tpa}        instead of ip/udp/agg
    payload: hex appended after the headers
    truncate: N                           keep only the first N bytes
    raw: hex                              the whole frame, nothing else applies
A worker's packet defaults to from -> service on the aggregation UDP port; a
`to:` frame (a result) defaults to service -> host with UDP checksum 0.
"""

from __future__ import annotations

import ipaddress
import struct

from agglab.testkit import layout

SERVICE_MAC, SERVICE_IP = "02:a6:67:ff:ff:fe", "10.255.255.254"
BROADCAST = "ff:ff:ff:ff:ff:ff"


def host(alias: str) -> tuple[str, str]:
    """(mac, ip) of a host alias: 'service' or 'h<N>'."""
    if alias == "service":
        return SERVICE_MAC, SERVICE_IP
    if alias.startswith("h") and alias[1:].isdigit():
        n = int(alias[1:])
        return f"02:00:00:00:00:{n:02x}", f"10.0.0.{n}"
    raise ValueError(f"unknown host alias {alias!r} (use hN or service)")


def mac_bytes(mac: str) -> bytes:
    return bytes(int(x, 16) for x in mac.split(":"))


def ip_bytes(ip: str | int) -> bytes:
    return ipaddress.IPv4Address(ip).packed


def checksum16(data: bytes) -> int:
    """RFC 1071, written here rather than taken from agglab.ground.wire: the vectors are built from
    the documented layout alone, so a mistake in the product's code cannot agree with itself."""
    if len(data) % 2:
        data += b"\0"
    s = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return ~s & 0xFFFF


def values_bytes(spec) -> bytes:
    if isinstance(spec, dict):
        if "fill" in spec:
            vals = [spec["fill"]] * layout.K
        else:
            vals = [spec.get("start", 0) + i * spec.get("step", 1) for i in range(layout.K)]
    else:
        vals = list(spec) + [0] * (layout.K - len(spec))
    if len(vals) != layout.K:
        raise ValueError(f"{len(vals)} values, K is {layout.K}")
    return b"".join(struct.pack("!I", v & 0xFFFFFFFF) for v in vals)


def _endpoints(spec: dict) -> tuple[str, str, str, str]:
    """(src mac, dst mac, src ip, dst ip) implied by from:/to:."""
    src = spec.get("from", "service" if "to" in spec else None)
    dst = spec.get("to", "service" if "from" in spec else None)
    smac, sip = host(src) if src else ("00:00:00:00:00:00", "0.0.0.0")
    dmac, dip = host(dst) if dst else ("00:00:00:00:00:00", "0.0.0.0")
    return smac, dmac, sip, dip


def build(spec: dict) -> bytes:
    """The frame bytes for a spec (see the module docstring)."""
    if "raw" in spec:
        return bytes.fromhex(str(spec["raw"]).replace(" ", ""))
    smac, dmac, sip, dip = _endpoints(spec)
    eth, ip, udp = spec.get("eth", {}), spec.get("ip", {}), spec.get("udp", {})
    is_agg = "agg" in spec or "values" in spec
    body = b""
    if "arp" in spec:
        a = spec["arp"]
        body = struct.pack("!HHBBH6s4s6s4s", 1, 0x0800, 6, 4, a.get("op", 1),
                           mac_bytes(a.get("sha", smac)), ip_bytes(a.get("spa", sip)),
                           mac_bytes(a.get("tha", "00:00:00:00:00:00")), ip_bytes(a["tpa"]))
        etype = 0x0806
    else:
        etype = 0x0800
    payload = bytes.fromhex(str(spec.get("payload", "")).replace(" ", ""))
    if is_agg:
        values = spec.get("values", [])
        payload = (layout.pack_agg(**spec.get("agg", {}))
                   + (values_bytes(values) if values is not None else b"") + payload)
    if etype == 0x0800 and (ip or is_agg or "from" in spec or "to" in spec):
        proto = ip.get("proto", 17)
        if proto == 17:
            default_port = layout.UDP_PORT if is_agg else 9
            default_csum = 0
            ulen = udp.get("len", 8 + len(payload))
            payload = struct.pack("!HHHH", udp.get("sport", default_port), udp.get("dport", default_port),
                                  ulen, udp.get("checksum", default_csum)) + payload
        options = bytes.fromhex(str(ip.get("options", "")))
        ihl = ip.get("ihl", 5 + len(options) // 4)
        head = struct.pack("!BBHHHBBH4s4s", 0x40 | ihl, ip.get("tos", 0),
                           ip.get("len", 20 + len(options) + len(payload)), ip.get("id", 0),
                           (ip.get("flags", 2) << 13) | ip.get("frag", 0), ip.get("ttl", 64), proto, 0,
                           ip_bytes(ip.get("src", sip)), ip_bytes(ip.get("dst", dip))) + options
        csum = ip.get("checksum", checksum16(head))
        body = head[:10] + struct.pack("!H", csum) + head[12:] + payload
    else:
        body += payload
    frame = (mac_bytes(eth.get("dst", dmac)) + mac_bytes(eth.get("src", smac))
             + struct.pack("!H", eth.get("type", etype)) + body)
    if "truncate" in spec:
        frame = frame[:spec["truncate"]]
    return frame


def describe(frame: bytes) -> str:
    """A one-line field view of a frame, for readable assertion messages."""
    if len(frame) < 14:
        return f"<{len(frame)} bytes: {frame.hex()}>"
    dst, src, etype = frame[0:6].hex(":"), frame[6:12].hex(":"), struct.unpack("!H", frame[12:14])[0]
    out = [f"eth {src}->{dst} type=0x{etype:04x}"]
    if etype == 0x0800 and len(frame) >= 34:
        ver_ihl, _tos, tlen, ident, _ff, ttl, proto, csum = struct.unpack("!BBHHHBBH", frame[14:26])
        out.append(f"ip {ipaddress.IPv4Address(frame[26:30])}->{ipaddress.IPv4Address(frame[30:34])} "
                   f"ihl={ver_ihl & 15} len={tlen} id={ident} ttl={ttl} proto={proto} csum=0x{csum:04x}")
        if proto == 17 and len(frame) >= 42:
            sport, dport, ulen, ucsum = struct.unpack("!HHHH", frame[34:42])
            out.append(f"udp {sport}->{dport} len={ulen} csum=0x{ucsum:04x}")
            if dport == layout.UDP_PORT and len(frame) >= layout.AGG_OFFSET + layout.AGG_H_BYTES:
                out.append(f"agg {layout.unpack_agg(frame, layout.AGG_OFFSET)}")
                n = min(layout.K, (len(frame) - layout.AGG_OFFSET - layout.AGG_H_BYTES) // 4)
                vals = struct.unpack_from(f"!{n}i", frame, layout.AGG_OFFSET + layout.AGG_H_BYTES)
                last = max((i for i, v in enumerate(vals) if v), default=-1)
                out.append(f"values[:{last + 1}]={list(vals[:last + 1])}")
    out.append(f"({len(frame)} bytes)")
    return " | ".join(out)


def fields(frame: bytes) -> dict:
    """The frame's named fields (eth, ip, udp, agg_h, value lanes), for field-level comparison."""
    out: dict = {"length": len(frame)}
    if len(frame) < 14:
        return out | {"bytes": frame.hex()}
    out |= {"eth.dst": frame[0:6].hex(":"), "eth.src": frame[6:12].hex(":"),
            "eth.type": f"0x{struct.unpack('!H', frame[12:14])[0]:04x}"}
    if out["eth.type"] == "0x0800" and len(frame) >= 34:
        ver_ihl, tos, tlen, ident, ff, ttl, proto, csum = struct.unpack("!BBHHHBBH", frame[14:26])
        out |= {"ip.src": str(ipaddress.IPv4Address(frame[26:30])),
                "ip.dst": str(ipaddress.IPv4Address(frame[30:34])), "ip.ihl": ver_ihl & 15, "ip.tos": tos,
                "ip.len": tlen, "ip.id": ident, "ip.flags": ff, "ip.ttl": ttl, "ip.proto": proto,
                "ip.checksum": f"0x{csum:04x}"}
        if proto == 17 and len(frame) >= 42:
            sport, dport, ulen, ucsum = struct.unpack("!HHHH", frame[34:42])
            out |= {"udp.sport": sport, "udp.dport": dport, "udp.len": ulen, "udp.checksum": f"0x{ucsum:04x}"}
            if dport == layout.UDP_PORT and len(frame) >= layout.AGG_OFFSET + layout.AGG_H_BYTES:
                out |= {f"agg.{k}": v for k, v in layout.unpack_agg(frame, layout.AGG_OFFSET).items()}
                n = min(layout.K, (len(frame) - layout.AGG_OFFSET - layout.AGG_H_BYTES) // 4)
                vals = struct.unpack_from(f"!{n}i", frame, layout.AGG_OFFSET + layout.AGG_H_BYTES)
                out |= {f"values[{i}]": v for i, v in enumerate(vals)}
    if not any(k.startswith("values") for k in out):
        out["rest"] = frame[14:].hex()
    return out


def first_difference(want: list[tuple[int, bytes]], got: list[tuple[int, bytes]]) -> str:
    """One line naming the first port or field where two lists of (port, frame) differ."""
    if len(want) != len(got):
        wp, gp = [p for p, _ in want], [p for p, _ in got]
        return (f"expected {len(want)} packet(s) out (ports {wp or 'none'}), got {len(got)} "
                f"(ports {gp or 'none'})")
    for (wport, wf), (gport, gf) in zip(want, got):
        if wport != gport:
            return f"a packet went out on port {gport}, expected port {wport}"
        if wf == gf:
            continue
        a, b = fields(wf), fields(gf)
        diff = [k for k in a if a.get(k) != b.get(k)] + [k for k in b if k not in a]
        shown = ", ".join(f"{k} expected {a.get(k)}, got {b.get(k)}" for k in diff[:3])
        more = f" (and {len(diff) - 3} more field(s))" if len(diff) > 3 else ""
        return f"packet out on port {wport}: {shown}{more}"
    return "no difference"
