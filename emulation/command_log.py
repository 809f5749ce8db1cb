"""Every control call the controller makes on a switch, one timestamped line each.

Why a wrapper around the client: the controller talks to a switch through the methods of
controller/switch_client.py (BMv2's client turns most of them into Thrift calls, not command
lines), so the one place that sees every call on either target is the object the job holds.
`agglab ... --keep DIR` wraps each switch's client so DIR/SWITCH.commands says what was
installed, read and written, and when (seconds since the network started), next to the
switch's own log.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

from agglab.controller.switch_client import SwitchClient


def _text(arg) -> str:
    if hasattr(arg, "tolist"):              # numpy arrays and scalars
        arg = arg.tolist()
    if isinstance(arg, (list, tuple)):
        return "[" + " ".join(_text(a) for a in arg) + "]"
    return str(arg)


class LoggedClient:
    """Forwards every call to `client`; writes `+SECONDS method args` (and `! error` when a
    call raises) to `path`. Command lines (`command`, `commands`) are written as sent."""

    def __init__(self, client: SwitchClient, path: Path, t0: float):
        self._client, self._t0 = client, t0
        self._file = open(path, "a", buffering=1)
        self._lock = threading.Lock()
        self.name = client.name

    def _write(self, lines: list[str]) -> None:
        stamp = f"+{time.monotonic() - self._t0:.6f} "
        with self._lock:
            if not self._file.closed:
                self._file.write("".join(stamp + line + "\n" for line in lines))

    def __getattr__(self, attr):
        target = getattr(self._client, attr)
        if not callable(target) or attr.startswith("_"):
            return target

        def call(*args, **kwargs):
            if attr == "command":
                self._write([str(args[0])])
            elif attr == "commands":
                self._write([str(line) for line in args[0]])
            elif attr not in ("close", "pids") and not attr.endswith("_lines"):   # these send nothing
                self._write([" ".join([attr, *(_text(a) for a in args),
                                       *(f"{k}={_text(v)}" for k, v in kwargs.items())])])
            try:
                return target(*args, **kwargs)
            except Exception as exc:
                self._write([f"! {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"])
                raise
        return call

    def close(self) -> None:
        try:
            self._client.close()
        finally:
            with self._lock:
                self._file.close()
