"""The `simple_switch_CLI` way in, as one CLI process kept open per switch.

Why kept open: the way without BMv2's Python modules on our side used to start one
simple_switch_CLI process per call, and the controller makes most of its calls one line at a
time (a tree install is an mc_group and a table_add per entry, each waiting for its handle).
Each process starts Python, imports Thrift and fetches and parses the switch's program (about a
second on a loaded 2-core machine), so a k=4 fat-tree spent many minutes in set-up and its
test ran out of time. One process per switch, fed line by line through a pipe, answers a line
in about a millisecond: the cost of the call, not of the program's start.

The CLI answers each line and then prints its prompt ("RuntimeCmd: "), so the answer to the
n-th line is what comes before the n-th prompt after the banner. A process that died (the
switch went away) or did not answer in time is dropped, and the next call starts another.
"""

from __future__ import annotations

import os
import select
import subprocess
import threading
import time

from agglab.controller.bmv2_tools import cli_python, find_bmv2_tool
from agglab.controller.switch_client import SwitchCommandError

PROMPT = b"RuntimeCmd: "


class CliSession:
    """One simple_switch_CLI process talking to the switch at `thrift_ip:thrift_port`."""

    def __init__(self, name: str, thrift_port: int, thrift_ip: str, timeout: float = 60.0):
        self.name, self.thrift_port, self.thrift_ip, self.timeout = name, thrift_port, thrift_ip, timeout
        self.proc: subprocess.Popen | None = None
        self._buf = b""

    def run(self, lines: list[str]) -> list[str]:
        """The CLI's answer to each line, in order (the caller checks them for errors)."""
        if not lines:
            return []
        if self.proc is None or self.proc.poll() is not None:
            self._start()
        data = ("\n".join(lines) + "\n").encode()
        # written by a thread of its own: a long batch's answers must be read while the rest of
        # it is still going in, or both pipes fill and the two processes wait on each other
        writer = threading.Thread(target=self._write, args=(self.proc, data), daemon=True)
        writer.start()
        try:
            return self._answers(len(lines), self.timeout + len(lines) / 50)
        except SwitchCommandError:
            self.close()
            raise
        finally:
            writer.join(timeout=1)

    def _start(self) -> None:
        cli = find_bmv2_tool("simple_switch_CLI")
        if not cli:
            raise SwitchCommandError("simple_switch_CLI not found (is BMv2 installed?)")
        self.proc = subprocess.Popen([cli_python(), cli, "--thrift-ip", self.thrift_ip,
                                      "--thrift-port", str(self.thrift_port)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     bufsize=0, env=dict(os.environ, PYTHONUNBUFFERED="1"),
                                     start_new_session=True)
        self._buf = b""
        try:
            self._answers(1, self.timeout)          # the banner, up to the first prompt
        except SwitchCommandError:
            self.close()
            raise

    @staticmethod
    def _write(proc: subprocess.Popen, data: bytes) -> None:
        try:
            proc.stdin.write(data)
            proc.stdin.flush()
        except (BrokenPipeError, ValueError, OSError):
            pass                                    # the CLI died: the reader says so

    def _answers(self, count: int, timeout: float) -> list[str]:
        """The text before each of the next `count` prompts."""
        answers: list[str] = []
        deadline = time.monotonic() + timeout
        fd = self.proc.stdout.fileno()
        while len(answers) < count:
            at = self._buf.find(PROMPT)
            if at >= 0:
                answers.append(self._buf[:at].decode(errors="replace").strip())
                self._buf = self._buf[at + len(PROMPT):]
                continue
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                raise SwitchCommandError(f"{self.name}: simple_switch_CLI answered {len(answers)} of {count} "
                                         f"lines in {timeout:.0f} s: {self._buf[-500:].decode(errors='replace')}")
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                raise SwitchCommandError(f"{self.name}: simple_switch_CLI exited ({self.proc.poll()}): "
                                         f"{self._buf[-2000:].decode(errors='replace')}")
            self._buf += chunk
        return answers

    def close(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None:
            return
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        for pipe in (proc.stdin, proc.stdout):
            try:
                pipe.close()
            except OSError:
                pass
