"""The aggregation packet format, derived from the P4 sources.

Why parse P4 from Python: the header layout and the constants (K values per
packet, UDP port, slot count) must be identical in the P4 program, the scapy
layer, the host agents and the software switch.  Reading
p4src/include/{constants,headers}.p4 here makes the P4 text the single source
of truth; tests/test_dissector.py and tests/test_hosts_protocol.py check that
consumers agree byte for byte.  AGGLAB_K picks the program variant (K_VARIANTS)
for a whole run.
"""

from __future__ import annotations

import os
import re
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from agglab.ground.paths import P4_INCLUDE

_DEFINE = re.compile(r"^\s*#define\s+(\w+)\s+(0x[0-9A-Fa-f]+|\d+)\b", re.M)
_FIELD = re.compile(r"^\s*bit<(\d+)>\s+(\w+)\s*;", re.M)


def read_constants(path: Path = P4_INCLUDE / "constants.p4") -> dict[str, int]:
    """All numeric #define lines of constants.p4 as a dict."""
    return {name: int(value, 0) for name, value in _DEFINE.findall(path.read_text())}


def read_all_constants(include: Path = P4_INCLUDE) -> dict[str, int]:
    """constants.p4's numeric #defines, then every other include's (a scheme's flag and counter
    indices live in its own .p4, so adding one touches no shared file). A name defined twice
    with two values is an error here, not a silent pick."""
    const = read_constants(include / "constants.p4")
    for path in sorted(include.glob("*.p4")):
        for name, value in read_constants(path).items():
            if const.setdefault(name, value) != value:
                raise ValueError(f"{path.name}: #define {name} {value} clashes with {const[name]} elsewhere")
    return const


def read_header_fields(header: str, path: Path = P4_INCLUDE / "headers.p4") -> list[tuple[str, int]]:
    """The (name, bit width) fields of `header NAME { ... }` in headers.p4, in order."""
    text = path.read_text()
    match = re.search(r"header\s+%s\s*\{(.*?)\}" % re.escape(header), text, re.S)
    if not match:
        raise ValueError(f"header {header} not found in {path}")
    return [(name, int(bits)) for bits, name in _FIELD.findall(match.group(1))]


CONST = read_all_constants()
K_VARIANTS: tuple[int, ...] = (CONST["AGG_K"], CONST["AGG_K_WIDE"])


def elements_per_packet(environ: Mapping[str, str] = os.environ) -> int:
    """The program variant's K: AGGLAB_K, else constants.p4's AGG_K.

    Why an environment variable: K sizes every frame, register and buffer, and is
    fixed when a P4 program is compiled (p4c -DAGG_K=...), so it is chosen once for
    a whole run; every process of the run (CLI, switch daemons, workers) inherits
    it and so reads the same value here."""
    raw = environ.get("AGGLAB_K", "").strip()
    if not raw:
        return K_VARIANTS[0]
    if not raw.isdigit() or int(raw) not in K_VARIANTS:
        raise BadVariant(f"agglab: AGGLAB_K={raw!r}: the P4 program is built for K in "
                         f"{', '.join(map(str, K_VARIANTS))} (constants.p4 AGG_K, AGG_K_WIDE)")
    return int(raw)


class BadVariant(SystemExit):
    """A process started with an AGGLAB_K no program variant has.  A SystemExit
    because it is raised while modules import, before any entry point could catch
    it: the user sees this one line (exit status 1), not a traceback."""


K: int = elements_per_packet()
DEFAULT_K, WIDE_K = K_VARIANTS
WIDE: bool = K != DEFAULT_K             # this process runs the wide program variant


def variant_suffix(k: int = K) -> str:
    """'' for the default program, '-k256' for the wide one: how a variant's files
    (calibration, experiment results) are kept apart."""
    return "" if k == DEFAULT_K else f"-k{k}"
UDP_PORT: int = CONST["AGG_UDP_PORT"]
SLOTS: int = CONST["AGG_SLOTS"]
# A switch's fan-in per tree (the contribution bitmap's width): a per-switch limit, not the
# job's size; a tree of switches aggregates more workers than one switch holds.
MAX_WORKERS: int = CONST["AGG_MAX_WORKERS"]
FLAG_RESULT: int = CONST["AGG_FLAG_RESULT"]
FLAG_RETX: int = CONST["AGG_FLAG_RETX"]
NEXT_NONE: int = CONST["AGG_NEXT_NONE"]
EXP_BIAS: int = CONST["AGG_EXP_BIAS"]

AGG_FIELDS: list[tuple[str, int]] = read_header_fields("agg_h")
AGG_HEADER_BYTES: int = sum(bits for _, bits in AGG_FIELDS) // 8
DATA_BYTES: int = 4 * K
PAYLOAD_BYTES: int = AGG_HEADER_BYTES + DATA_BYTES
ETH_BYTES, IPV4_BYTES, UDP_BYTES = 14, 20, 8
AGG_OFFSET: int = ETH_BYTES + IPV4_BYTES + UDP_BYTES   # agg_h offset in a frame
FRAME_BYTES: int = AGG_OFFSET + PAYLOAD_BYTES
ACK_FRAME_BYTES: int = AGG_OFFSET + AGG_HEADER_BYTES   # a header-only frame (the sparse ACK)


def dense_frames(elements: int, dtype: str = "int32", window: int | None = None) -> int:
    """Aggregation frames one worker sends in a dense call of `elements` (hosts/agent.py): its
    K-blocks, plus with `window` its lead frames: float32 leads on each of its
    min(window, blocks) slots (round 0 carries the exponents, no block), int32 on slot 0 only
    (no exponents to agree). The one count behind both wire times: a run's on its network
    (emulation/wire_model.py `wire_seconds`) and one link's (emulation/fidelity.py
    `dense_link_seconds`)."""
    blocks = -(-elements // K)
    if not window:
        return blocks
    return blocks + (max(1, min(window, blocks)) if dtype == "float32" else 1)


@dataclass(frozen=True)
class _Word:
    """A group of consecutive fields that together fill one struct word."""
    code: str                      # struct code: B, H or I
    fields: tuple[tuple[str, int], ...]


def _group_words(fields: list[tuple[str, int]]) -> list[_Word]:
    codes = {8: "B", 16: "H", 32: "I"}
    words, group, width = [], [], 0
    for name, bits in fields:
        group.append((name, bits))
        width += bits
        if width in codes:
            words.append(_Word(codes[width], tuple(group)))
            group, width = [], 0
        elif width > 32:
            raise ValueError(f"agg_h fields {group} do not pack into 8/16/32-bit words")
    if group:
        raise ValueError(f"agg_h ends with a partial word: {group}")
    return words


_WORDS = _group_words(AGG_FIELDS)
AGG_STRUCT = struct.Struct("!" + "".join(w.code for w in _WORDS))
FIELD_NAMES: tuple[str, ...] = tuple(name for name, _ in AGG_FIELDS)
# Workers of one job: every packet carries its sender's rank in agg_h.worker (the switches
# check it against the port's rank), so a job has at most as many ranks as that field holds.
MAX_RANKS: int = 1 << dict(AGG_FIELDS)["worker"]
assert AGG_STRUCT.size == AGG_HEADER_BYTES


def pack_agg(**fields: int) -> bytes:
    """Encode an agg_h header; missing fields are 0 (next_block defaults to NEXT_NONE)."""
    fields.setdefault("next_block", NEXT_NONE)
    unknown = set(fields) - set(FIELD_NAMES)
    if unknown:
        raise KeyError(f"unknown agg_h fields: {sorted(unknown)}")
    words = []
    for word in _WORDS:
        value, shift = 0, sum(bits for _, bits in word.fields)
        for name, bits in word.fields:
            shift -= bits
            field = int(fields.get(name, 0))
            if not 0 <= field < (1 << bits):
                raise ValueError(f"agg_h.{name}={field} does not fit in {bits} bits")
            value |= field << shift
        words.append(value)
    return AGG_STRUCT.pack(*words)


def unpack_agg(buf: bytes | bytearray | memoryview, offset: int = 0) -> dict[str, int]:
    """Decode an agg_h header at `offset` into a dict of field values."""
    out: dict[str, int] = {}
    for word, value in zip(_WORDS, AGG_STRUCT.unpack_from(buf, offset)):
        shift = sum(bits for _, bits in word.fields)
        for name, bits in word.fields:
            shift -= bits
            out[name] = (value >> shift) & ((1 << bits) - 1)
    return out


def inet_checksum(data: bytes) -> int:
    """The Internet checksum (RFC 1071) of `data`: what a header built by hand (a test
    frame, an ICMP echo, a fuzzed packet) stores. The switch's per-frame IPv4 update has
    its own unrolled copy (softswitch/deparser.py) because it runs on every packet."""
    if len(data) % 2:
        data += b"\0"
    total = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF
