"""Many datagrams per system call: Linux recvmmsg(2)/sendmmsg(2) through ctypes.

Why: the software switch and the bench senders spend a large share of each
frame on the system call itself (one recv and one send per frame from
Python).  recvmmsg/sendmmsg move a whole batch per call with the exact
per-message semantics of recv/send (each message is its own datagram or
frame, a refused one fails alone), so nothing about loss or ordering
changes; only the number of kernel entries does.  The standard library has
no binding for them and no maintained PyPI/Debian package offers one, but
the calls are two plain libc functions, so ctypes is enough.

Layout (x86-64 and every other 64-bit Linux ABI): struct iovec is
{void *base; size_t len} (16 bytes), struct msghdr is 56 bytes with
msg_iov at 16, msg_iovlen at 24 and msg_flags at 48, struct mmsghdr is
{msghdr; unsigned msg_len} padded to 64 bytes.  Every message has one iovec
into a fixed slot of one preallocated arena; the hot path touches the
arena and two integer views (iov_len, msg_len) through memoryviews, never a
ctypes object.

    batch = MsgBatch(64, 2048)
    n = batch.recv(sock.fileno())            # frames are batch.frame(i) for i < n
    batch.put(0, b"...")                      # stage a datagram in slot 0
    sent = batch.send(sock.fileno(), 1)       # how many went out; batch.errno after a refusal
"""

from __future__ import annotations

import ctypes
import ctypes.util
import mmap
import os
import socket
import struct
import sys

import numpy as np

MSG_DONTWAIT = 0x40
MSG_TRUNC = 0x20
_IOVEC, _MMSG = 16, 64                 # sizeof(struct iovec), sizeof(struct mmsghdr)
_LEN_WORD = 56 // 4                     # msg_len, as a uint32 index within one mmsghdr
_FLAGS_WORD = 48 // 4                   # msghdr.msg_flags


def _load_libc():
    """libc with recvmmsg/sendmmsg, or None where they do not exist (non-Linux, 32-bit)."""
    if not sys.platform.startswith("linux") or struct.calcsize("P") != 8:
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        send, recv = libc.sendmmsg, libc.recvmmsg
    except (OSError, AttributeError):
        return None
    send.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_uint, ctypes.c_int]
    recv.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_uint, ctypes.c_int, ctypes.c_void_p]
    send.restype = recv.restype = ctypes.c_int
    return libc


_LIBC = _load_libc()
AVAILABLE = _LIBC is not None


class MsgBatch:
    """`count` message headers, each owning one `slot`-byte buffer of a shared arena.

    The same object serves receiving (every iov_len is the full slot) and
    sending (put() sets the slot's length); a daemon keeps one for receiving
    and one per egress port for sending."""

    def __init__(self, count: int, slot: int, fd: int = -1, dest: tuple[str, int] | None = None):
        """`fd`: the socket send() uses by default (a switch keeps one batch per port);
        `dest`: an IPv4 (address, port) every message is sent to (unconnected UDP)."""
        if not AVAILABLE:
            raise OSError("recvmmsg/sendmmsg are not available on this platform")
        self.count, self.slot = count, slot
        # An anonymous mapping, not a bytearray: its pages stay unbacked until a frame lands
        # in them, so a 64 x 64 KiB receive arena costs a few pages, not 4 MiB per switch.
        self.arena = mmap.mmap(-1, count * slot)
        self._iov = bytearray(count * _IOVEC)
        self._hdr = bytearray(count * _MMSG)
        self._name = bytearray(16)                              # struct sockaddr_in
        if dest:
            struct.pack_into("=H2s4s", self._name, 0, socket.AF_INET, struct.pack("!H", dest[1]),
                             socket.inet_aton(dest[0]))
        # from_buffer pins each buffer (it can no longer be resized or closed) and gives its address
        self._pins = [(ctypes.c_char * len(b)).from_buffer(b)
                      for b in (self.arena, self._iov, self._hdr, self._name)]
        arena_at, iov_at, self._hdr_at, name_at = (ctypes.addressof(p) for p in self._pins)
        for i in range(count):
            if dest:
                struct.pack_into("PI", self._hdr, i * _MMSG, name_at, 16)           # msg_name(len)
            struct.pack_into("PN", self._iov, i * _IOVEC, arena_at + i * slot, slot)
            struct.pack_into("P", self._hdr, i * _MMSG + 16, iov_at + i * _IOVEC)   # msg_iov
            struct.pack_into("N", self._hdr, i * _MMSG + 24, 1)                     # msg_iovlen
        self.view = memoryview(self.arena)
        self.iov_len = memoryview(self._iov).cast("Q")          # [2*i + 1] is message i's length
        self.words = memoryview(self._hdr).cast("I")            # [16*i + 14] is msg_len of message i
        # the same memory for numpy: rows[i, :n] is slot i, lengths[i] its iov_len,
        # received[i] the msg_len of message i (whole batches without a Python loop)
        self.rows = np.frombuffer(self.arena, np.uint8).reshape(count, slot)
        self.lengths = np.frombuffer(self._iov, np.uint64)[1::2]
        self.received = np.frombuffer(self._hdr, np.uint32).reshape(count, 16)[:, _LEN_WORD]
        self.errno = 0
        self.fd = fd

    # ---- receiving -------------------------------------------------------------------
    def recv(self, fd: int, count: int | None = None) -> int:
        """Receive up to `count` datagrams without blocking; 0 when none is waiting.

        Raises OSError for anything but EAGAIN (like sock.recv_into would)."""
        n = _LIBC.recvmmsg(fd, self._hdr_at, count or self.count, MSG_DONTWAIT, None)
        if n < 0:
            err = ctypes.get_errno()
            if err in (11, 4):                                  # EAGAIN/EWOULDBLOCK, EINTR
                return 0
            raise OSError(err, os.strerror(err))
        return n

    def length(self, i: int) -> int:
        """Bytes received into message i (the frame's full length)."""
        return self.words[16 * i + _LEN_WORD]

    def set_length(self, i: int, n: int) -> None:
        """Record that message i holds n bytes (for a caller that filled the slot itself)."""
        self.words[16 * i + _LEN_WORD] = n

    def truncated(self, i: int) -> bool:
        """True if message i was longer than its slot (the tail is lost)."""
        return bool(self.words[16 * i + _FLAGS_WORD] & MSG_TRUNC)

    def frame(self, i: int) -> bytes:
        """A copy of message i."""
        start = i * self.slot
        return bytes(self.view[start:start + self.words[16 * i + _LEN_WORD]])

    # ---- sending ---------------------------------------------------------------------
    def put(self, i: int, data: bytes) -> None:
        """Stage `data` as message i (len(data) <= slot)."""
        start = i * self.slot
        n = len(data)
        self.view[start:start + n] = data
        self.iov_len[2 * i + 1] = n

    def send(self, fd: int, count: int, first: int = 0) -> int:
        """Send messages first..count-1 in order with one call; returns how many left.

        sendmmsg stops at the first message the kernel refuses; its errno is
        kept in self.errno (0 when all went) so the caller can count that one
        as dropped and go on with the next."""
        self.errno = 0
        n = _LIBC.sendmmsg(fd, self._hdr_at + first * _MMSG, count - first, MSG_DONTWAIT)
        if n < 0:
            self.errno = ctypes.get_errno()
            return 0
        return n

