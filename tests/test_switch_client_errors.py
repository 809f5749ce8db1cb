"""A software switch whose control socket is gone (killed, not yet restarted) fails its batch
with the controller's SwitchCommandError, like any dead switch, and never stops the batches
to the others (controller/switch_batches.py). The socket layer (softswitch/control.py) has an
error class of its own for "cannot connect" and "closed the connection"; it used to leave
SoftSwitchClient unconverted, so send_batches raised it before the other switches' answers
were read, and a reroute failed without its clean-up: their answers ("held for at most
500 ms") stayed in the sockets and the next reroute took them for its own (chaos seed 15)."""

from __future__ import annotations

import json
import socket
import threading

import pytest

from agglab.controller.switch_batches import collect_batches, send_batches
from agglab.controller.switch_client import SoftSwitchClient, SwitchCommandError


class _Answering:
    """A unix-socket control server that answers `ping` with `pong` and any other line with itself."""

    def __init__(self, path):
        self.path = str(path)
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(self.path)
        self.sock.listen()
        self.conns = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.conns.append(conn)
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn):
        buf = b""
        try:
            while data := conn.recv(4096):
                buf += data
                while b"\n" in buf:
                    line, buf = buf.split(b"\n", 1)
                    text = line.decode()
                    conn.sendall((json.dumps({"ok": True, "output": "pong" if text == "ping" else text})
                                  + "\n").encode())
        except OSError:
            pass

    def die(self):
        """The switch process is gone: nothing listens, every connection closed, no socket file."""
        self.sock.close()
        for c in self.conns:
            c.close()
        import os
        os.unlink(self.path)


def test_a_switch_whose_socket_is_gone_fails_only_its_own_batch_and_the_others_are_read(tmp_path):
    live, dead = _Answering(tmp_path / "a.sock"), _Answering(tmp_path / "b.sock")
    clients = {"a": SoftSwitchClient("a", live.path), "b": SoftSwitchClient("b", dead.path)}
    dead.die()
    clients["b"]._client.close()            # its next batch connects anew: refused
    pending = send_batches(clients, {"a": ["ports_hold 500", "table_delete agg_job 1"], "b": ["ports_hold 500"]})
    with pytest.raises(SwitchCommandError, match="b"):
        collect_batches(pending)
    assert clients["a"].command("counter_read agg_stats 0") == "counter_read agg_stats 0"   # nothing stale left
    with pytest.raises(SwitchCommandError, match="^b: control connection lost"):
        clients["b"].commands(["ping"])
