"""A fuzzer for the switches' aggregation path: hostile frames from a host that is not in a job.

    python -m agglab.hosts.fuzz --iface h3-eth0 --frames 100000 [--rate 20000] [--seed 1] [--json]

Run it inside a host's network namespace (the lab: `h3 .venv/bin/python -m agglab.hosts.fuzz
--iface h3-eth0 ...`); it sends Ethernet/IPv4/UDP frames to the aggregation service address on
the aggregation UDP port, mixing (round-robin over a seeded shuffle):

- `scapy`: scapy's `fuzz()` of the aggregation header (hosts/scapy_layer.py's `Agg` layer: every
  field random: job, tree, epoch, flags, version, slot, worker, exp, blocks), K random values;
- `random`: job/tree/epoch/version/slot/worker drawn at random, a well-formed packet otherwise;
- `truncated`: a frame cut anywhere after its Ethernet header and before the K values end;
- `length`: the IPv4 total length and UDP length lying (disagreeing with each other, too short for
  agg_h + K values, or longer than the frame);
- `duplicate`: the previous frame again;
- `replay`: a job's own header (--job/--tree) with an epoch older than --epoch.

Every frame is one a switch must reject, and the fuzzer knows why, because it built it that
way: at a port with no agg_job entry (a host outside every job) the data plane counts a frame cut
short as `malformed`, lying lengths as `length` (checked before the lookup) and everything else
as `no_entry` (p4src/include/job.p4, the agg_rejects counter). The report (JSON with --json)
gives frames sent, per kind, and the rejects expected per reason, for comparison with the
switch's counters.
"""

from __future__ import annotations

import argparse
import fcntl
import functools
import json
import operator
import random
import socket
import struct
import sys
import time
from collections import Counter

from agglab.ground import wire
from agglab.ground.addresses import SERVICE_IP, SERVICE_MAC
from agglab.ground.priority import as_batch_work
from agglab.ground.schemes import OWN_TABLE, SCHEMES

KINDS = ("scapy", "random", "truncated", "length", "duplicate", "replay")
ACK_ONLY = wire.CONST["AGG_FLAG_ACK"] | wire.CONST["AGG_FLAG_SPARSE"]
UDP_LEN = wire.UDP_BYTES + wire.PAYLOAD_BYTES            # a well-formed data packet's UDP length


def frame(src_mac: bytes, src_ip: bytes, payload: bytes, ip_len: int | None = None,
          udp_len: int | None = None) -> bytes:
    """Ethernet/IPv4/UDP to the aggregation service around `payload`; lengths may be forced."""
    ulen = wire.UDP_BYTES + len(payload) if udp_len is None else udp_len
    ilen = wire.IPV4_BYTES + wire.UDP_BYTES + len(payload) if ip_len is None else ip_len
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, ilen & 0xFFFF, 0, 0x4000, 64, 17, 0, src_ip,
                     socket.inet_aton(SERVICE_IP))
    ip = ip[:10] + struct.pack("!H", wire.inet_checksum(ip)) + ip[12:]
    udp = struct.pack("!HHHH", wire.UDP_PORT, wire.UDP_PORT, ulen & 0xFFFF, 0)
    return bytes.fromhex(SERVICE_MAC.replace(":", "")) + src_mac + b"\x08\x00" + ip + udp + payload


FLAGS_AT = wire.AGG_OFFSET + 3
# the flags of the P4 schemes with a table of their own (ground/schemes.py OWN_TABLE: ATP)
OWN_TABLE_FLAGS = functools.reduce(operator.or_, (SCHEMES[n].flag_bits for n in OWN_TABLE), 0)


def _without_own_tables(data: bytes) -> bytes:
    """The frame with the own-table schemes' flags clear: such a packet is not judged by
    agg_job (atp.p4 has its own table and forwards what it does not aggregate by IPv4), so
    it has no reject reason."""
    if len(data) > FLAGS_AT and data[FLAGS_AT] & OWN_TABLE_FLAGS:
        data = data[:FLAGS_AT] + bytes((data[FLAGS_AT] & ~OWN_TABLE_FLAGS,)) + data[FLAGS_AT + 1:]
    return data


class Fuzzer:
    """Builds hostile frames with the reject reason each must get at a non-member port."""

    def __init__(self, src_mac: str, src_ip: str, seed: int = 0, job: int = 0, tree: int = 0, epoch: int = 1):
        self.rng = random.Random(seed)
        self.mac = bytes.fromhex(src_mac.replace(":", ""))
        self.ip = socket.inet_aton(src_ip)
        self.job, self.tree, self.epoch = job, tree, epoch
        self.last: tuple[bytes, str] | None = None

    def _values(self) -> bytes:
        return self.rng.randbytes(wire.DATA_BYTES)

    def _header(self, **fields) -> bytes:
        r = self.rng
        f = dict(job=r.randrange(256), tree=r.randrange(256), epoch=r.randrange(256),
                 flags=r.randrange(256), ver=r.randrange(2), slot=r.randrange(1 << 15), worker=r.randrange(256),
                 exp=r.randrange(256), block=r.getrandbits(32), next_block=r.getrandbits(32))
        f.update(fields)
        return wire.pack_agg(**f)

    def make(self, kind: str) -> tuple[bytes, str]:
        """(frame, reject reason expected at a port outside every job)."""
        r = self.rng
        if kind == "duplicate" and self.last is not None:
            return self.last
        if kind == "scapy":
            from scapy.packet import fuzz  # lazy: scapy, only make() needs it
            from agglab.hosts.scapy_layer import Agg  # lazy: loads scapy, only make() needs it

            agg = bytes(fuzz(Agg(values=[r.randrange(-2**31, 2**31) for _ in range(wire.K)])))
            out = frame(self.mac, self.ip, agg[:wire.PAYLOAD_BYTES]), "no_entry"
        elif kind == "truncated":      # no ACK|SPARSE: the parser needs the K values, so any cut is an error
            full = frame(self.mac, self.ip, self._header(flags=r.randrange(256) & ~0x08) + self._values())
            out = full[:r.randrange(wire.ETH_BYTES, len(full))], "malformed"
        elif kind == "length":
            payload = self._header(flags=r.randrange(256) & ~0x08) + self._values()
            how = r.randrange(3)
            if how == 0:               # IPv4 and UDP disagree
                udp_len = r.randrange(1 << 16)
                ip_len = (udp_len + wire.IPV4_BYTES + r.randrange(1, 1 << 16)) & 0xFFFF    # != the 16-bit sum
            elif how == 1:             # too short for agg_h + K values
                udp_len = r.randrange(UDP_LEN)
                ip_len = udp_len + wire.IPV4_BYTES
            else:                      # longer than the frame
                udp_len = r.randrange(UDP_LEN + 1, (1 << 16) - wire.IPV4_BYTES)
                ip_len = udp_len + wire.IPV4_BYTES
            out = frame(self.mac, self.ip, payload, ip_len=ip_len, udp_len=udp_len), "length"
        elif kind == "replay":         # a job's own fields, from an earlier epoch
            old = (self.epoch - 1 - r.randrange(max(1, self.epoch))) & 0xFF
            hdr = self._header(job=self.job, tree=self.tree, epoch=old, flags=r.choice([0, 2]))
            out = frame(self.mac, self.ip, hdr + self._values()), "no_entry"
        else:                          # random (and a duplicate before any frame)
            out = frame(self.mac, self.ip, self._header() + self._values()), "no_entry"
        out = _without_own_tables(out[0]), out[1]
        self.last = out
        return out

    def frames(self, count: int):
        """`count` (frame, kind, reason), the kinds mixed in seeded rounds."""
        order: list[str] = []
        for _ in range(count):
            if not order:
                order = list(KINDS)
                self.rng.shuffle(order)
            kind = order.pop()
            data, reason = self.make(kind)
            yield data, kind, reason


def interface_address(iface: str) -> tuple[str, str]:
    """(MAC, IPv4) of a local interface."""
    mac = open(f"/sys/class/net/{iface}/address").read().strip()
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        ip = socket.inet_ntoa(fcntl.ioctl(s.fileno(), 0x8915, struct.pack("256s", iface.encode()[:15]))[20:24])
    finally:
        s.close()
    return mac, ip


def run(iface: str, count: int, rate: float | None = None, seed: int = 0, job: int = 0, tree: int = 0,
        epoch: int = 1, on_progress=None) -> dict:
    """Build `count` frames, then send them on `iface` (AF_PACKET) at `rate` frames/s (None: as
    fast as possible); returns the report."""
    mac, ip = interface_address(iface)
    fz = Fuzzer(mac, ip, seed=seed, job=job, tree=tree, epoch=epoch)
    t0 = time.monotonic()
    built = list(fz.frames(count))
    build_s = time.monotonic() - t0
    sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)
    sock.bind((iface, 0))
    kinds, reasons = Counter(), Counter()
    errors = 0
    started_at = time.time()               # wall clock: a harness compares it with its own runs
    start = time.monotonic()
    try:
        for i, (data, kind, reason) in enumerate(built):
            if rate and i % 32 == 0:           # pace in bursts of 32
                ahead = start + i / rate - time.monotonic()
                if ahead > 0:
                    time.sleep(ahead)
            try:
                sock.send(data)
            except OSError:                # e.g. ENOBUFS: not sent, so not expected either
                errors += 1
                continue
            kinds[kind] += 1
            reasons[reason] += 1
            if on_progress and i % 10_000 == 0:
                on_progress(i, count)
    finally:
        sock.close()
    seconds = time.monotonic() - start
    ended_at = time.time()
    sent = sum(kinds.values())
    return {"frames": count, "sent": sent, "send_errors": errors,
            "seconds": round(seconds, 3), "rate_fps": round(sent / seconds) if seconds else None,
            "build_seconds": round(build_s, 3), "kinds": dict(sorted(kinds.items())),
            "send_started": started_at, "send_ended": ended_at,
            "expected_rejects": dict(sorted(reasons.items())), "iface": iface, "seed": seed}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m agglab.hosts.fuzz", description=__doc__.splitlines()[0])
    ap.add_argument("--iface", required=True, help="the interface to send on (this host's link to a switch)")
    ap.add_argument("--frames", type=int, default=10_000)
    ap.add_argument("--rate", type=float, default=None, help="frames per second (default: as fast as possible)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--job", type=int, default=0, help="the job whose old epochs are replayed")
    ap.add_argument("--tree", type=int, default=0)
    ap.add_argument("--epoch", type=int, default=1, help="the job's current epoch (replays use older ones)")
    ap.add_argument("--json", action="store_true", help="print the report as one JSON object")
    args = ap.parse_args(argv)
    if args.frames < 1 or (args.rate is not None and args.rate <= 0):
        print("agglab.hosts.fuzz: --frames and --rate must be positive", file=sys.stderr)
        return 2

    as_batch_work()          # a program of an emulated host, as the workers: it never preempts a switch
    try:
        report = run(args.iface, args.frames, args.rate, args.seed, args.job, args.tree, args.epoch,
                     on_progress=None if args.json else
                     (lambda i, n: print(f"  {i}/{n} frames sent", file=sys.stderr, flush=True)))
    except OSError as exc:
        print(f"agglab.hosts.fuzz: {args.iface}: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(report, sort_keys=True))
    else:
        print(f"{report['sent']} frames sent in {report['seconds']} s ({report['rate_fps']} frames/s); "
              f"kinds {report['kinds']}; the switch should reject them as {report['expected_rejects']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
