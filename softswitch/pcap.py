"""Minimal pcap (libpcap classic format) writer and reader.

Why by hand: the format is a 24-byte file header plus a 16-byte header per
record, and writing it with struct into a buffered file costs far less per
packet than scapy's PcapWriter (which builds packet objects).  The reader
exists for tests and post-mortems without tcpdump/scapy.
"""

from __future__ import annotations

import struct
import time
from pathlib import Path

MAGIC_US = 0xA1B2C3D4              # microsecond timestamps
LINKTYPE_ETHERNET = 1
SNAPLEN = 65535
_FILE_HDR = struct.Struct("<IHHiIII")
_REC_HDR = struct.Struct("<IIII")


class PcapWriter:
    """Append Ethernet frames to a pcap file; flushed by the caller (periodically) and on close.

    The file is opened with a large buffer so per-packet writes are memory
    copies; `flush()` makes the data visible to readers while the switch runs."""

    def __init__(self, path: str | Path, snaplen: int = SNAPLEN):
        self.path = Path(path)
        self.snaplen = snaplen
        self.count = 0
        self._file = open(self.path, "wb", buffering=1 << 20)
        self._file.write(_FILE_HDR.pack(MAGIC_US, 2, 4, 0, 0, snaplen, LINKTYPE_ETHERNET))
        self._write = self._file.write
        self._pack = _REC_HDR.pack

    def write(self, frame, ts: float | None = None) -> None:
        """Record one frame (bytes, bytearray or memoryview) with timestamp `ts` (default: now)."""
        if ts is None:
            ts = time.time()
        sec = int(ts)
        n = len(frame)
        cap = n if n <= self.snaplen else self.snaplen
        self._write(self._pack(sec, int((ts - sec) * 1e6), cap, n))
        self._write(frame if cap == n else frame[:cap])
        self.count += 1

    def flush(self) -> None:
        if not self._file.closed:
            self._file.flush()

    def close(self) -> None:
        if not self._file.closed:
            self._file.close()


def read_pcap(path: str | Path) -> list[tuple[float, bytes]]:
    """All records of a classic pcap file as (timestamp, frame) pairs (either byte order).

    Raises ValueError on a bad magic number; a truncated final record (file
    still being written) is ignored."""
    data = Path(path).read_bytes()
    if len(data) < _FILE_HDR.size:
        raise ValueError(f"{path}: too short for a pcap header ({len(data)} bytes)")
    magic = struct.unpack_from("<I", data)[0]
    if magic in (MAGIC_US, 0xA1B23C4D):
        endian = "<"
    elif magic in (0xD4C3B2A1, 0x4D3CB2A1):
        endian = ">"
    else:
        raise ValueError(f"{path}: not a pcap file (magic {magic:#x})")
    scale = 1e-9 if magic in (0xA1B23C4D, 0x4D3CB2A1) else 1e-6
    rec = struct.Struct(endian + "IIII")
    out, off = [], _FILE_HDR.size
    while off + rec.size <= len(data):
        sec, frac, cap, _orig = rec.unpack_from(data, off)
        off += rec.size
        if off + cap > len(data):
            break
        out.append((sec + frac * scale, data[off:off + cap]))
        off += cap
    return out
