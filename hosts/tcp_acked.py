"""How many bytes of a TCP socket's stream its peer has acknowledged (the kernel's TCP_INFO).

Why: a worker's flow that has bytes queued but whose socket takes none for `give_up` seconds
looked stalled to hosts/flow_loop.py. On a slow link shared by many flows it is not: a
parameter server's 7 pushes share one uplink, each socket's send buffer is full, and it turns
writable again only after a third of it drains, which at a seventh of 1.25 Mb/s can take longer
than the give-up (a PS of 8 x 4 MiB at 1.25 Mb/s gave up every time, docs/measurements.md,
ninth session). The peer's acknowledgements say whether the kernel still moves the flow's
bytes; zero-window probes of a peer that reads nothing do not advance them.
"""

from __future__ import annotations

import socket
import struct

# struct tcp_info (linux/tcp.h): tcpi_bytes_acked is the u64 at byte 120 (Linux 4.1 and later)
_BYTES_ACKED = struct.Struct("=Q")
_OFFSET = 120
_SIZE = _OFFSET + _BYTES_ACKED.size


def bytes_acked(sock: socket.socket) -> int | None:
    """Bytes of this socket's stream the peer has acknowledged; None where TCP_INFO does not
    say (not a TCP socket, an older kernel, another system)."""
    try:
        info = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, _SIZE)
    except (OSError, AttributeError):
        return None
    if len(info) < _SIZE:
        return None
    return _BYTES_ACKED.unpack_from(info, _OFFSET)[0]
