"""The per-server agent: one small process per server, on the same ssh connection, that
keeps the files the head and the workers share in step.

Why: on one machine the controller's epoch file and the workers' progress files are shared
through the filesystem; across servers they are not. The head sends `put PATH BASE64`
whenever it rewrites an epoch file (the agent writes it atomically: the workers compare its
bytes), and `watch DIR`; the agent answers `file PATH BASE64` whenever a `*.progress` file
under a watched directory changes (every POLL seconds), which the head writes to the same
path for the failure injector and the progress bar. For the fidelity record the head sends
`clock` (answered `clock T`, this server's monotonic clock, for the head to place its samples
on its own), `probe SECONDS RUN_DIR INTF,...` (start sampling those interfaces, the
processes whose pid files are in the run's directories, and the server's CPU; `-` for no
interface) and `probe-stop` (answered `samples BASE64`, the JSON of what was sampled). For the
controller, `links INTF,...` watches those interfaces with netlink (emulation/link_monitor.py,
in the server's root namespace, where its switch ends and tunnel ends are) and answers
`link INTF up|down T` at every change (T on this server's clock, for its log; the head dates
the change when the answer reaches it, as the controller on one machine dates netlink's event
when it reads it): a link that goes down on a server for any reason (a cable pulled from a
real one, `ip link set ... down` there) reaches the controller as on one machine. For a link
change on BMv2 (emulation/cluster/bmv2.py), `pause PID,...` stops every process in those
host shells' namespaces (answered `paused N`), `idle INTF,...` waits until those ports stop
counting (`idle SECONDS`) and `resume` lets the stopped processes go on (`resumed N`; the
agent also does it when the head hangs up). `signal SIG PID` signals a process there at once
(no answer): a killed switch's SIGKILL is a line on a connection already open, not a new ssh
command, which took seconds on a saturated machine. It runs on the server as `python -m agglab.emulation.cluster.agent`.
"""

from __future__ import annotations

import base64
import json
import os
import queue
import shlex
import subprocess
import sys
import threading
import time
import traceback
from pathlib import Path

from agglab.emulation import bmv2_ports
from agglab.emulation.cluster.sampler import ServerSampler
from agglab.ground.paths import IMPORT_ROOT

POLL = 0.02


def serve() -> int:
    watched: list[Path] = []
    seen: dict[str, bytes] = {}
    lock = threading.Lock()
    out_lock = threading.Lock()
    out = sys.stdout.buffer
    sampler = monitor = None
    paused: list[int] = []                # stopped by `pause`, until `resume`

    def say(line: bytes) -> None:
        with out_lock:
            out.write(line + b"\n")
            out.flush()

    def dirs() -> list[Path]:
        with lock:
            return list(watched)

    def reader():
        nonlocal sampler, monitor
        for raw in sys.stdin.buffer:
            words = raw.decode().split()
            if not words:
                continue
            if words[0] == "put" and len(words) == 3:
                path = Path(words[1])
                tmp = path.with_name(f".{path.name}.tmp")
                tmp.write_bytes(base64.b64decode(words[2]))
                os.replace(tmp, path)
            elif words[0] == "watch" and len(words) == 2:
                with lock:
                    watched.append(Path(words[1]))
            elif words[0] == "clock":
                say(b"clock %r" % time.monotonic())
            elif words[0] == "probe" and len(words) == 4:
                run_dir = Path(words[2])
                sampler = ServerSampler([i for i in words[3].split(",") if i not in ("", "-")],
                                        lambda: [run_dir, *dirs()], float(words[1])).start()
            elif words[0] == "links" and len(words) == 2:
                from agglab.emulation.link_monitor import LinkMonitor  # lazy: loads pyroute2, only serve() needs it

                if monitor is not None:
                    monitor.stop()
                names = {i for i in words[1].split(",") if i not in ("", "-")}
                monitor = LinkMonitor(names, lambda name, up, t: say(
                    b"link %s %s %r" % (name.encode(), b"up" if up else b"down", t))).start()
                say(b"links %d" % len(names))          # watching from here on
            elif words[0] == "pause" and len(words) == 2:
                shells = [int(p) for p in words[1].split(",") if p.isdigit()]
                bmv2_ports.stop(bmv2_ports.processes_in_netns(shells), paused)
                say(b"paused %d" % len(paused))
            elif words[0] == "idle" and len(words) == 2:
                say(b"idle %r" % bmv2_ports.wait_idle([i for i in words[1].split(",") if i not in ("", "-")]))
            elif words[0] == "resume":
                bmv2_ports.resume(paused)
                say(b"resumed %d" % len(paused))
                paused.clear()
            elif words[0] == "signal" and len(words) == 3 and words[1].isdigit() and words[2].isdigit():
                try:
                    os.kill(int(words[2]), int(words[1]))
                except ProcessLookupError:
                    pass
            elif words[0] == "probe-stop":
                data = sampler.stop() if sampler is not None else {}
                sampler = None
                say(b"samples " + base64.b64encode(json.dumps(data).encode()))
        if paused:                        # the head hung up: nothing stays stopped

            bmv2_ports.resume(paused)
        os._exit(0)                       # ... done

    threading.Thread(target=reader, daemon=True).start()
    while True:
        for d in dirs():
            for f in d.glob("*.progress"):
                try:
                    data = f.read_bytes()
                except OSError:
                    continue
                if data and seen.get(str(f)) != data:
                    seen[str(f)] = data
                    say(b"file %s %s" % (str(f).encode(), base64.b64encode(data)))
        time.sleep(POLL)


class AgentLink:
    """The head's side: starts the agent over ssh, pushes the run's epoch files when their
    bytes change (polled every EPOCH_POLL s), writes the progress files it reports."""

    EPOCH_POLL = 0.003

    def __init__(self, remote, run_dir: Path):
        self.remote, self.run_dir = remote, Path(run_dir)
        self.proc = None
        self._stop = threading.Event()
        self._sent: dict[str, bytes] = {}
        self._lock = threading.Lock()
        self._replies: dict[str, "queue.Queue[str]"] = {
            r: queue.Queue() for r in ("clock", "samples", "links", "paused", "idle", "resumed")}
        self.on_link = None           # on_link(intf, up, t: when the head got it), once watch_links

    def start(self) -> "AgentLink":
        from agglab.emulation.cluster.remote import python_env_words  # lazy: loads PyYAML, only start() needs it

        cmd = (f"cd {shlex.quote(str(IMPORT_ROOT))} && exec env {python_env_words(IMPORT_ROOT)} "
               f"{shlex.quote(sys.executable)} -m agglab.emulation.cluster.agent")
        self.proc = self.remote.popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                      stderr=subprocess.DEVNULL, start_new_session=True)
        threading.Thread(target=self._read, daemon=True, name=f"agent-{self.remote.server.name}").start()
        threading.Thread(target=self._push_epochs, daemon=True, name=f"epochs-{self.remote.server.name}").start()
        return self

    def _send(self, line: str) -> None:
        with self._lock:
            if self.proc.poll() is None:
                try:
                    self.proc.stdin.write(line.encode() + b"\n")
                    self.proc.stdin.flush()
                except (BrokenPipeError, ValueError):
                    pass

    def tell(self, line: str) -> None:
        """A command that has no answer (`probe ...`)."""
        self._send(line)

    def watch(self, directory: Path) -> None:
        self._send(f"watch {directory}")

    def clock_offset(self, wait: float = 5.0) -> float | None:
        """The server's monotonic clock minus the head's, from one round trip (Cristian's
        algorithm); None if the agent did not answer."""
        t0 = time.monotonic()
        reply = self.ask("clock", "clock", wait)
        t1 = time.monotonic()
        return None if reply is None else float(reply) - (t0 + t1) / 2

    def watch_links(self, intfs: list[str], on_link, wait: float = 5.0) -> bool:
        """Have the agent report every change of `intfs` to `on_link(intf, up, t)`, t the head's
        monotonic time when the report arrived (never before the change, whatever the two
        clocks' offset: a failure's detection time is measured from when it was made); True
        once it watches (False: no answer within `wait`)."""
        self.on_link = on_link
        return self.ask(f"links {','.join(intfs) or '-'}", "links", wait) is not None

    def _push_epochs(self) -> None:
        while not self._stop.wait(self.EPOCH_POLL):
            for f in self.run_dir.glob("epoch*.json"):
                try:
                    data = f.read_bytes()
                except OSError:
                    continue
                if data and self._sent.get(str(f)) != data:
                    self._sent[str(f)] = data
                    self._send(f"put {f} {base64.b64encode(data).decode()}")

    def ask(self, line: str, reply: str, timeout: float) -> str | None:
        """Send `line` and wait for the agent's next `reply` line (its words after the first),
        None if none came within `timeout` (an agent that died, an old agent)."""
        replies = self._replies[reply]
        while not replies.empty():
            replies.get_nowait()
        self._send(line)
        try:
            return replies.get(timeout=timeout)
        except queue.Empty:
            return None

    def _read(self) -> None:
        for raw in self.proc.stdout:
            words = raw.decode(errors="replace").split()
            if len(words) == 2 and words[0] in self._replies:
                self._replies[words[0]].put(words[1])
            elif len(words) == 4 and words[0] == "link" and self.on_link is not None:
                try:
                    self.on_link(words[1], words[2] == "up", time.monotonic())
                except Exception:  # noqa: BLE001 - the reader must go on: progress files come here too

                    traceback.print_exc()
            elif len(words) == 3 and words[0] == "file":
                path = Path(words[1])
                try:
                    if path.parent.is_dir():
                        data = base64.b64decode(words[2])
                        fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
                        try:
                            os.pwrite(fd, data, 0)
                        finally:
                            os.close(fd)
                except (OSError, ValueError):
                    pass

    def close(self) -> None:
        self._stop.set()
        if self.proc is None:
            return
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        try:
            self.proc.wait(3)
        except Exception:  # noqa: BLE001 - a hung ssh is killed
            self.proc.kill()
            self.proc.wait()


if __name__ == "__main__":
    sys.exit(serve())
