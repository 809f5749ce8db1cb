"""Raw-socket switch ports: one AF_PACKET socket per interface.

Why raw AF_PACKET sockets and not TAP/pcap: the switch must see and emit
whole Ethernet frames on interfaces Mininet already created (veth ends in the
root namespace), with no extra kernel objects and no libraries.  Each port is
one non-blocking SOCK_RAW socket bound to its interface for ETH_P_ALL.

Details that matter for correctness:
  * the socket is created with protocol 0 (receives nothing) and only then
    bound to (ifname, ETH_P_ALL); creating it with ETH_P_ALL would let frames
    from *every* interface slip in before bind();
  * PACKET_IGNORE_OUTGOING keeps our own transmissions (and anything else
    the kernel sends out of the port) out of the receive queue; a classic
    BPF socket filter on the pkttype drops PACKET_OUTGOING frames too, so
    both guards cost nothing per frame in user space (recvfrom_into would
    allocate an address tuple and do an ioctl per frame to report pkttype);
  * offloads are switched off so no frame carries a partial checksum or a
    GSO super-frame we would forward verbatim and break TCP with.
"""

from __future__ import annotations

import ctypes
import errno
import socket
import struct
import subprocess
from pathlib import Path

from agglab.ground.mmsg import MsgBatch

ETH_P_ALL = 0x0003
SOL_PACKET = 263
PACKET_IGNORE_OUTGOING = 23
PACKET_OUTGOING = 4
SO_ATTACH_FILTER = 26
SKF_AD_PKTTYPE = (-0x1000 + 4) & 0xFFFFFFFF     # ancillary load: skb->pkt_type
SO_RCVBUFFORCE = getattr(socket, "SO_RCVBUFFORCE", 33)
SO_SNDBUFFORCE = getattr(socket, "SO_SNDBUFFORCE", 32)
SOCKET_BUFFER = 16 << 20           # bytes; absorbs bursts of a few thousand frames
MAX_FRAME = 65536                  # receive slot size; > any MTU we run with
TX_SLOT = 2048                     # transmit slot size; a larger frame is sent on its own


def disable_offloads(ifname: str) -> str:
    """`ethtool -K IF rx off tx off tso off gso off gro off`; returns a log note, never raises.

    The switch re-injects frames it received; with offloads on, the kernel
    hands us frames with CHECKSUM_PARTIAL (wrong checksum on the wire) or
    GRO-merged frames larger than the MTU."""
    cmd = ["ethtool", "-K", ifname, "rx", "off", "tx", "off", "tso", "off", "gso", "off", "gro", "off"]
    try:
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError) as exc:
        return f"ethtool failed: {exc}"
    if res.returncode != 0:
        return f"ethtool rc={res.returncode}: {(res.stderr or res.stdout).strip()[:200]}"
    return "offloads off"


def quiet_interface(ifname: str) -> str:
    """Disable IPv6 on a switch port so the kernel does not emit RS/MLD/DAD frames from it.

    A switch port is a wire, not a host interface; kernel chatter sent out of
    it would reach the attached host as if the switch had forwarded it."""
    path = Path("/proc/sys/net/ipv6/conf") / ifname / "disable_ipv6"
    try:
        path.write_text("1")
        return "ipv6 off"
    except OSError as exc:
        return f"ipv6 not disabled: {exc.strerror}"


def set_up(ifname: str) -> str:
    """Bring the interface up (a switch port is always administratively up)."""
    try:
        res = subprocess.run(["ip", "link", "set", "dev", ifname, "up"],
                             capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError) as exc:
        return f"link up failed: {exc}"
    return "up" if res.returncode == 0 else f"link up failed: {res.stderr.strip()[:200]}"


def attach_skip_outgoing(sock: socket.socket) -> None:
    """Attach `ld pkttype; jeq PACKET_OUTGOING -> drop; accept` as a socket filter."""
    prog = [(0x20, 0, 0, SKF_AD_PKTTYPE),        # BPF_LD|BPF_W|BPF_ABS
            (0x15, 0, 1, PACKET_OUTGOING),       # BPF_JMP|BPF_JEQ|BPF_K
            (0x06, 0, 0, 0),                     # BPF_RET: drop
            (0x06, 0, 0, 0xFFFFFFFF)]            # BPF_RET: whole frame
    insns = ctypes.create_string_buffer(b"".join(struct.pack("HBBI", *i) for i in prog))
    fprog = struct.pack("HL", len(prog), ctypes.addressof(insns))
    sock.setsockopt(socket.SOL_SOCKET, SO_ATTACH_FILTER, fprog)


class RawPort:
    """One switch port: a bound, non-blocking AF_PACKET socket plus its fast-path callables.

    `recv_into(buf) -> n` and `send(frame)` are the socket's bound methods,
    kept as attributes so the event loop looks them up once; n == 0 means
    "skip this frame" (only on the slow path without kernel guards)."""

    def __init__(self, port: int, ifname: str, *, prepare: bool = True):
        self.port = port
        self.ifname = ifname
        self.notes: list[str] = []
        if not Path("/sys/class/net", ifname).exists():
            raise OSError(errno.ENODEV, f"interface {ifname!r} does not exist")
        if prepare:
            self.notes += [set_up(ifname), disable_offloads(ifname), quiet_interface(ifname)]
        sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)
        try:
            self._buffers(sock)
            try:
                sock.setsockopt(SOL_PACKET, PACKET_IGNORE_OUTGOING, 1)
                self.ignore_outgoing = True
            except OSError as exc:
                self.ignore_outgoing = False
                self.notes.append(f"PACKET_IGNORE_OUTGOING unavailable ({exc.strerror})")
            try:
                attach_skip_outgoing(sock)
                self.filtered = True
            except OSError as exc:
                self.filtered = False
                self.notes.append(f"pkttype filter not attached ({exc.strerror})")
            sock.bind((ifname, ETH_P_ALL))
            sock.setblocking(False)
        except BaseException:
            sock.close()
            raise
        self.sock = sock
        self.send = sock.send
        self.recv_batch = self._recv_mmsg if (self.ignore_outgoing or self.filtered) \
            else self._recv_checked

    def _recv_mmsg(self, batch: MsgBatch, count: int) -> int:
        """Up to `count` frames into `batch` with one recvmmsg; 0 when none is waiting."""
        return batch.recv(self.sock.fileno(), count)

    def _recv_checked(self, batch: MsgBatch, count: int) -> int:
        """Slow path when neither kernel guard is available: one recvfrom per frame, so the
        address tells outgoing frames (skipped) from received ones."""
        got = 0
        for _ in range(count):
            start = got * batch.slot
            try:
                n, addr = self.sock.recvfrom_into(batch.view[start:start + batch.slot])
            except BlockingIOError:
                break
            if addr[2] != PACKET_OUTGOING:
                batch.set_length(got, n)
                got += 1
        return got

    def tx_batch(self, batch: int = 64) -> MsgBatch:
        """A send batch bound to this port (`.fd`): frames staged in it leave with one sendmmsg."""
        return MsgBatch(batch, TX_SLOT, fd=self.sock.fileno())

    def _buffers(self, sock: socket.socket) -> None:
        """Large socket buffers: FORCE variants (root) bypass net.core.[rw]mem_max."""
        for force, plain in ((SO_RCVBUFFORCE, socket.SO_RCVBUF), (SO_SNDBUFFORCE, socket.SO_SNDBUF)):
            try:
                sock.setsockopt(socket.SOL_SOCKET, force, SOCKET_BUFFER)
            except OSError:
                sock.setsockopt(socket.SOL_SOCKET, plain, SOCKET_BUFFER)

    def fileno(self) -> int:
        return self.sock.fileno()

    def close(self) -> None:
        self.sock.close()

    def __repr__(self) -> str:
        return f"RawPort({self.port}={self.ifname})"
