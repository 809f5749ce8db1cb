"""Control channel of the software switch: a Unix stream socket, one JSON line per command.

Protocol: the client writes one command line (simple_switch_CLI syntax or a
daemon command such as `port_stats`, `ping`, `shutdown`) terminated by
"\\n"; the server answers one line `{"ok": bool, "output": str}`.  A
connection may carry any number of commands, answered in order.

Why the server is non-blocking and callback-driven: the switch runs one
event loop for frames and control; serving commands between packet batches
means table updates never race with packet processing, so no locks.
"""

from __future__ import annotations

import errno
import functools
import json
import os
import select
import socket
import struct
import time
from collections.abc import Callable
from pathlib import Path

MAX_LINE = 1 << 20                 # longest accepted command line (bytes)


class SwitchCommandError(RuntimeError):
    """The switch answered ok=false (the message is its output) or could not be reached."""


class SwitchNotReady(RuntimeError):
    """The daemon died or never opened its control socket; the message has its log tail."""


class _Conn:
    __slots__ = ("sock", "inbuf", "outbuf", "closing", "want_out")

    def __init__(self, sock: socket.socket):
        self.sock, self.inbuf, self.outbuf = sock, bytearray(), bytearray()
        self.closing = self.want_out = False


class ControlServer:
    """Listens on `path`; `handler(line) -> (ok, output)` runs inside the caller's event loop.

    The owner passes `register(fd, events, callback)`, `modify(fd, events)`
    and `unregister(fd)` of its epoll loop; callbacks receive the event mask."""

    def __init__(self, path: str | Path, handler: Callable[[str], tuple[bool, str]],
                 register, modify, unregister):
        self.path = str(path)
        self._handler = handler
        self._register, self._modify, self._unregister = register, modify, unregister
        self._conns: dict[int, _Conn] = {}
        _claim_path(self.path)
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._sock.bind(self.path)
        self._sock.listen(16)
        self._sock.setblocking(False)
        register(self._sock.fileno(), select.EPOLLIN, self._accept)

    def _accept(self, _events: int) -> None:
        while True:
            try:
                sock, _ = self._sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            sock.setblocking(False)
            fd = sock.fileno()
            self._conns[fd] = _Conn(sock)
            self._register(fd, select.EPOLLIN, functools.partial(self._on_conn, fd))

    def _on_conn(self, fd: int, events: int) -> None:
        conn = self._conns.get(fd)
        if conn is None:
            return
        if events & select.EPOLLIN:
            try:
                data = conn.sock.recv(65536)
            except (BlockingIOError, InterruptedError):
                data = None
            except OSError:
                data = b""
            if data == b"":
                conn.closing = True
            elif data:
                conn.inbuf += data
                self._serve_lines(conn)
        elif events & (select.EPOLLHUP | select.EPOLLERR):
            conn.closing = True
        self._flush(fd, conn)

    def _serve_lines(self, conn: _Conn) -> None:
        while True:
            nl = conn.inbuf.find(b"\n")
            if nl < 0:
                if len(conn.inbuf) > MAX_LINE:
                    conn.outbuf += _reply(False, f"command line longer than {MAX_LINE} bytes")
                    conn.inbuf.clear()
                    conn.closing = True
                return
            line = conn.inbuf[:nl].decode("utf-8", "replace").strip()
            del conn.inbuf[:nl + 1]
            if line:
                try:
                    ok, output = self._handler(line)
                except Exception as exc:          # handler bugs must not kill the switch
                    ok, output = False, f"internal error: {type(exc).__name__}: {exc}"
                conn.outbuf += _reply(ok, output)

    def _flush(self, fd: int, conn: _Conn) -> None:
        while conn.outbuf:
            try:
                sent = conn.sock.send(conn.outbuf)
            except (BlockingIOError, InterruptedError):
                if not conn.want_out:             # reply larger than the socket buffer
                    conn.want_out = True
                    self._modify(fd, select.EPOLLIN | select.EPOLLOUT)
                return
            except OSError:
                conn.outbuf.clear()
                conn.closing = True
                break
            del conn.outbuf[:sent]
        if conn.closing:
            self._drop(fd)
        elif conn.want_out:
            conn.want_out = False
            self._modify(fd, select.EPOLLIN)

    def _drop(self, fd: int) -> None:
        conn = self._conns.pop(fd, None)
        if conn is not None:
            self._unregister(fd)
            conn.sock.close()

    def close(self, linger: float = 1.0) -> None:
        """Stop listening, give pending replies (e.g. to `shutdown`) `linger` s, remove the socket file."""
        for fd, conn in list(self._conns.items()):
            if conn.outbuf:
                try:
                    conn.sock.settimeout(linger)
                    conn.sock.sendall(conn.outbuf)
                except OSError:
                    pass
            self._drop(fd)
        self._unregister(self._sock.fileno())
        self._sock.close()
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass


def _reply(ok: bool, output: str) -> bytes:
    return (json.dumps({"ok": ok, "output": output}) + "\n").encode()


def _claim_path(path: str) -> None:
    """Remove a stale socket file; refuse if a live switch still answers there."""
    if not os.path.exists(path):
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        return
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.settimeout(1.0)
        probe.connect(path)
    except OSError:
        os.unlink(path)                          # nobody listening: leftover of a crash
        return
    finally:
        probe.close()
    raise OSError(errno.EADDRINUSE, f"control socket {path} is in use by a running switch")


class ControlClient:
    """Blocking client for one switch; keeps its connection open across commands."""

    def __init__(self, path: str | Path, timeout: float = 30.0):
        self.path = str(path)
        self.timeout = timeout
        self._sock: socket.socket | None = None
        self._buf = bytearray()
        self._peer: tuple = (None, None)       # (connection, the daemon's pid): peer_pid()

    def _connect(self) -> socket.socket:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        try:
            sock.connect(self.path)
        except OSError as exc:
            sock.close()
            raise SwitchCommandError(f"cannot connect to switch at {self.path}: {exc.strerror or exc}") from exc
        self._buf.clear()
        return sock

    def request(self, line: str) -> tuple[bool, str]:
        """Send one command, return (ok, output) without raising on ok=false."""
        if "\n" in line or "\r" in line:
            raise ValueError(f"one command per call, got a line break in {line!r}")
        data = (line.strip() + "\n").encode()
        fresh = self._sock is None
        if fresh:
            self._sock = self._connect()
        try:
            self._sock.sendall(data)
        except OSError:
            self.close()
            if fresh:
                raise SwitchCommandError(f"switch at {self.path} closed the connection")
            self._sock = self._connect()     # stale connection (switch restarted): nothing was sent
            self._sock.sendall(data)
        return self._read_reply(line)

    def _read_reply(self, line: str) -> tuple[bool, str]:
        while True:
            nl = self._buf.find(b"\n")
            if nl >= 0:
                raw = bytes(self._buf[:nl])
                del self._buf[:nl + 1]
                msg = json.loads(raw)
                return bool(msg["ok"]), str(msg["output"])
            try:
                chunk = self._sock.recv(1 << 16)
            except socket.timeout:
                self.close()
                raise SwitchCommandError(f"switch at {self.path}: no reply to {line!r} within {self.timeout}s")
            except OSError as exc:
                self.close()
                raise SwitchCommandError(f"switch at {self.path}: {exc}") from exc
            if not chunk:
                self.close()
                raise SwitchCommandError(f"switch at {self.path} closed the connection during {line!r}")
            self._buf += chunk

    def request_many(self, lines: list[str]) -> list[tuple[bool, str]]:
        """Pipeline many commands in one write (bulk register preloads), replies in order."""
        self.send_many(lines)
        return self.read_many(lines)

    def send_many(self, lines: list[str]) -> None:
        """The first half of request_many: send, read later with read_many (so that batches
        to several switches are worked on at once)."""
        if any("\n" in line or "\r" in line for line in lines):
            raise ValueError("one command per line")
        if self._sock is None:
            self._sock = self._connect()
        self._sock.sendall("".join(line.strip() + "\n" for line in lines).encode())

    def read_many(self, lines: list[str]) -> list[tuple[bool, str]]:
        """The replies to a send_many, in order."""
        return [self._read_reply(line) for line in lines]

    def peer_pid(self) -> int | None:
        """The switch daemon's pid, as the kernel tells it on the connection (SO_PEERCRED;
        asked once per connection: a restarted switch is a new connection)."""
        try:
            if self._sock is None:
                self._sock = self._connect()
            if self._peer[0] is not self._sock:
                creds = self._sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
                self._peer = (self._sock, struct.unpack("3i", creds)[0] or None)
        except (OSError, SwitchCommandError):
            return None
        return self._peer[1]

    def command(self, line: str) -> str:
        """Run one command; return its output or raise SwitchCommandError with the switch's message."""
        ok, output = self.request(line)
        if not ok:
            raise SwitchCommandError(f"{line.strip()!r} failed: {output}")
        return output

    def port_stats(self) -> dict[str, dict]:
        return json.loads(self.command("port_stats"))

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    def __enter__(self) -> "ControlClient":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def log_tail(log: str | Path | None, lines: int = 25) -> str:
    if log is None:
        return "(no log file given)"
    try:
        text = Path(log).read_text(errors="replace").splitlines()
    except OSError as exc:
        return f"(log {log} unreadable: {exc.strerror})"
    return "\n".join(text[-lines:]) or f"(log {log} is empty)"


def _exit_status(process) -> int | str | None:
    """None while alive; the exit code (Popen) or 'gone' (pid) once dead."""
    if process is None:
        return None
    if hasattr(process, "poll"):
        return process.poll()
    try:
        state = Path(f"/proc/{int(process)}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return "gone"
    return "zombie" if state == "Z" else None


def wait_ready(path: str | Path, timeout: float = 10.0, *, log: str | Path | None = None,
               process=None) -> ControlClient:
    """Wait until the switch at `path` answers `ping`; return a connected client.

    `process` (a Popen or pid) lets this notice a daemon that died instead of
    waiting out the timeout; either failure raises SwitchNotReady with the
    tail of `log`, which is where the daemon explains itself.  Without `log`,
    PATH with suffix .log is used when it exists (the Mininet nodes' layout)."""
    if log is None and Path(path).with_suffix(".log").exists():
        log = Path(path).with_suffix(".log")
    deadline = time.monotonic() + timeout
    last = "socket not created yet"
    while True:
        status = _exit_status(process)
        if status is not None:
            raise SwitchNotReady(f"switch exited ({status}) before answering on {path}\n"
                                 f"--- log tail ---\n{log_tail(log)}")
        if os.path.exists(path):
            client = ControlClient(path, timeout=max(1.0, deadline - time.monotonic()))
            try:
                if client.command("ping") == "pong":
                    client.timeout = 30.0
                    client._sock.settimeout(30.0)
                    return client
            except SwitchCommandError as exc:
                last = str(exc)
            client.close()
        if time.monotonic() >= deadline:
            raise SwitchNotReady(f"switch at {path} not ready after {timeout}s ({last})\n"
                                 f"--- log tail ---\n{log_tail(log)}")
        time.sleep(0.05)
