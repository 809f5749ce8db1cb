"""BMv2 simple_switch as a conformance target: compiled agglab.p4, real frames on veths.

Why real frames instead of BMv2's packet-in/out APIs: the vectors claim what
goes on the wire, so the check goes through the same path a Mininet run uses
(libpcap ports, the deparser, checksum units).  simple_switch is restarted
for every vector so state never carries over; the namespace is kept for the
session.  `close()` always removes the switch and the namespace, and an atexit
hook backs it up if the interpreter dies on the way.
"""

from __future__ import annotations

import atexit
import re
import select
import signal
import socket
import subprocess
import time
from pathlib import Path

from agglab.emulation.p4build import compile_p4 as cached, p4c_command, sources_digest
from agglab.ground import lifeline, paths
from agglab.ground.paths import P4SRC
from agglab.controller.bmv2_tools import cli_python, find_bmv2_tool, simple_switch_note
from agglab.testkit.netns import Namespace, inside
from agglab.softswitch.schemes import write_p4

THRIFT_PORT = 9090                # inside our own namespace, so never in conflict
ETH_P_ALL = 0x0003
PACKET_OUTGOING = 4
_ERROR = re.compile(r"^(Invalid|Error|\*\*\* Unknown)|exception|Traceback", re.M)


def find_tools() -> dict[str, str] | None:
    """Paths of p4c, simple_switch, simple_switch_CLI and a Python that can run the CLI."""
    tools = {name: find_bmv2_tool(name) for name in ("p4c", "simple_switch", "simple_switch_CLI")}
    if not all(tools.values()):
        return None
    tools["cli_python"] = cli_python()
    return tools


def compile_p4(p4c: str, out_dir: Path) -> Path:
    """The BMv2 JSON of P4SRC/agglab.p4: the project's own sources come from agglab.emulation.p4build's
    cache (the end-to-end BMv2 tests compile them too: one p4c run per source change, ~30 s saved
    per test session), and so does another source tree (an exercise's overlay sets P4SRC) whose
    sources are byte for byte the project's (a solution); any other is compiled here."""
    if Path(P4SRC) == paths.P4SRC:
        return cached()
    write_p4(Path(P4SRC) / "include")
    if sources_digest(Path(P4SRC)) == sources_digest():
        return cached()
    proc = subprocess.run(p4c_command(p4c, P4SRC / "agglab.p4", out_dir), capture_output=True, text=True,
                          timeout=600)
    json_path = out_dir / "agglab.json"
    if proc.returncode != 0 or not json_path.exists():
        raise RuntimeError(f"p4c failed:\n{proc.stdout}\n{proc.stderr}")
    return json_path


class Bmv2Target:
    name = "bmv2"

    def __init__(self, tools: dict[str, str], workdir: Path, nports: int, log_level: str = "debug"):
        """log_level: simple_switch's console log (-L); "debug" traces every packet (the vectors'
        logs show why a packet went where), "warn" saves the differential test's thousands of
        packets that (a divergence it finds is replayed with `agglab vectors run`, at debug)."""
        self.tools, self.workdir, self.nports = tools, Path(workdir), nports
        self.log_level = log_level
        self.ns = Namespace(nports)
        self.proc: subprocess.Popen | None = None
        self.socks: dict[int, socket.socket] = {}
        self.json: Path | None = None
        self.starts = 0

    # ---- lifecycle ----------------------------------------------------------------
    def start(self) -> None:
        self.json = compile_p4(self.tools["p4c"], self.workdir)
        atexit.register(self.close)
        self.ns.create()
        with inside(self.ns.name):
            for port in range(1, self.nports + 1):
                s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
                s.bind((self.ns.host_if(port), 0))
                s.setblocking(False)
                self.socks[port] = s

    def reset(self, ports: set[int]) -> None:
        """A fresh simple_switch: empty tables, zero registers, no groups."""
        self._stop_switch()
        self.starts += 1
        log = self.workdir / f"simple_switch.{self.starts}.log"
        ifaces = [arg for p in range(1, self.nports + 1) for arg in ("-i", f"{p}@{self.ns.switch_if(p)}")]
        # the notifications socket lives in the shared /tmp otherwise (bmv2-<device>-...):
        # another simple_switch on the machine would make ours fail to start, or the reverse
        ipc = f"ipc://{self.workdir}/notifications.ipc"
        cmd = self.ns.exec_args(self.tools["simple_switch"], "--thrift-port", str(THRIFT_PORT),
                                "--notifications-addr", ipc, "--log-console", "-L", self.log_level,
                                *ifaces, str(self.json))
        with open(log, "w") as out:
            out.write(simple_switch_note() + "\n")      # a performance build's log has no packets
            out.flush()
            self.proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                                         preexec_fn=lifeline.preexec())      # dies with an interrupted checker
        self.log = log
        self._wait_thrift()
        self._drain()

    def _wait_thrift(self, timeout: float = 20.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"simple_switch exited ({self.proc.returncode}):\n{self.log.read_text()[-3000:]}")
            with inside(self.ns.name):
                try:
                    socket.create_connection(("127.0.0.1", THRIFT_PORT), timeout=0.5).close()
                    return
                except OSError:
                    pass
            time.sleep(0.1)
        raise RuntimeError(f"simple_switch thrift not up after {timeout}s:\n{self.log.read_text()[-3000:]}")

    def _stop_switch(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)
        self.proc = None

    def close(self) -> None:
        self._stop_switch()
        for s in self.socks.values():
            s.close()
        self.socks.clear()
        self.ns.delete()

    # ---- control ----------------------------------------------------------------------
    def commands(self, lines: list[str]) -> list[str]:
        """All lines through one simple_switch_CLI; answers split at the prompts."""
        if not lines:
            return []
        proc = subprocess.run(self.ns.exec_args(self.tools["cli_python"], self.tools["simple_switch_CLI"],
                                                "--thrift-port", str(THRIFT_PORT)),
                              input="\n".join(lines) + "\n", capture_output=True, text=True, timeout=120)
        parts = proc.stdout.split("RuntimeCmd: ")
        answers = [p.strip() for p in parts[1:1 + len(lines)]]
        if proc.returncode != 0 or len(answers) != len(lines):
            raise RuntimeError(f"simple_switch_CLI failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
        for line, answer in zip(lines, answers):
            if _ERROR.search(answer):
                raise RuntimeError(f"BMv2 refused {line!r}: {answer}")
        return answers

    # ---- packets --------------------------------------------------------------------
    @staticmethod
    def _incoming(s) -> list[bytes]:
        """Every frame waiting on packet socket `s` that the switch sent (not our own sends)."""
        frames = []
        while True:
            try:
                data, addr = s.recvfrom(65535)
            except BlockingIOError:
                return frames
            if addr[2] != PACKET_OUTGOING:
                frames.append(data)

    def _drain(self) -> list[tuple[int, bytes]]:
        return [(port, data) for port, s in self.socks.items() for data in self._incoming(s)]

    def inject(self, port: int, frame: bytes, expected: int) -> list[tuple[int, bytes]]:
        """Send `frame` into switch port `port`; collect what comes out until quiet."""
        stray = self._drain()
        assert not stray, f"frames nobody asked for: {stray}"
        self.socks[port].send(frame)
        by_fd = {s.fileno(): p for p, s in self.socks.items()}
        got: list[tuple[int, bytes]] = []
        deadline = time.monotonic() + 3.0          # BMv2 with debug logs: milliseconds per packet
        settle = 0.3 if expected == 0 else 0.15    # then wait this long for anything unexpected
        quiet_until = None
        while True:
            now = time.monotonic()
            if quiet_until is None and len(got) >= expected:
                quiet_until = now + settle
            end = quiet_until if quiet_until is not None else deadline
            if now >= end:
                break
            ready, _, _ = select.select(list(self.socks.values()), [], [], end - now)
            for s in ready:
                got += [(by_fd[s.fileno()], data) for data in self._incoming(s)]
        return got
