"""Mininet switch nodes for the two data planes.

Both run in the root namespace attached to their Mininet interfaces and are stopped
(and their pids forgotten) by Mininet's own stop(); a crashed run is cleaned by
`agglab clean` from the pids recorded in the run directory. Software switches are forked
by one launcher per network (softswitch/launcher.py: Python, numpy and the pipeline are
imported once, not once per switch); BMv2's simple_switch is started as it is.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from mininet.node import Switch

from agglab.controller.bmv2_tools import find_bmv2_tool, simple_switch_note
from agglab.ground import lifeline
from agglab.ground.paths import IMPORT_ROOT
from agglab.ground.rundir import Refused, RunRecord

SUN_PATH_MAX = 107             # a Unix socket address's path, bytes (108 with its NUL)
from agglab.softswitch.launcher import Launcher

LAUNCHER_LABEL = "switch launcher"       # its line in the run's pids (not a data plane)


def _log_tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


class _ProcessSwitch(Switch):
    """A switch whose data plane is one external process."""

    def __init__(self, name, run: RunRecord, **params):
        Switch.__init__(self, name, **params)
        self.run = run
        self.proc: subprocess.Popen | None = None
        self.log_path = run.path / f"{name}.log"

    def data_ports(self) -> dict[int, str]:
        return {self.ports[i]: i.name for i in self.intfList() if i.name != "lo" and self.ports[i] > 0}

    def _spawn(self, argv: list[str]) -> None:
        with open(self.log_path.with_suffix(".out"), "ab") as out:
            self.proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=_env(),
                                         start_new_session=True, cwd=IMPORT_ROOT, preexec_fn=lifeline.preexec())
        self._started()

    def _started(self) -> None:
        self.run.add_pid(self.proc.pid, f"{self.name} data plane")

    def died(self) -> str | None:
        """None while running, else a message with the tail of the log."""
        if self.proc is None or self.proc.poll() is None:
            return None
        return (f"switch {self.name} exited with code {self.proc.returncode}; last lines of "
                f"{self.log_path}:\n{_log_tail(self.log_path)}\n{_log_tail(self.log_path.with_suffix('.out'))}")

    def stop(self, deleteIntfs=True):
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=3)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        Switch.stop(self, deleteIntfs)


def _env() -> dict[str, str]:
    """Switch processes import this checkout first, keeping any PYTHONPATH the caller set."""
    return dict(os.environ, PYTHONPATH=str(IMPORT_ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))


def start_launcher(run: RunRecord):
    """The network's software-switch launcher (softswitch/launcher.py), recorded in `run`;
    it imports while the rest of the network is built."""
    launcher = Launcher(run.path / "launcher.out", cwd=IMPORT_ROOT, env=_env())
    run.add_pid(launcher.pid, LAUNCHER_LABEL)
    return launcher


class SoftP4Switch(_ProcessSwitch):
    """The project's software switch (`python -m agglab.softswitch`, forked by `launcher`)."""

    def __init__(self, name, run: RunRecord, launcher, seed: int = 0, pcap: bool = False,
                 coalesce: float = 0.0, **params):
        _ProcessSwitch.__init__(self, name, run, **params)
        self.launcher = launcher
        self.coalesce = coalesce             # the daemon's --coalesce (ground/links.py switch_coalesce)
        self.seed = seed
        self.pcap = pcap
        self.control_path = run.path / f"{name}.sock"

    def start(self, controllers):
        argv = ["--name", self.name, "--control", str(self.control_path), "--log", str(self.log_path),
                "--seed", str(self.seed),
                "--no-prepare"]              # the network prepared its ports (emulation/veths.py quiet_ends)
        if self.coalesce:
            argv += ["--coalesce", repr(self.coalesce)]
        for number, intf in sorted(self.data_ports().items()):
            argv += ["--port", f"{number}={intf}"]
        if self.pcap:
            argv += ["--pcap-dir", str(self.run.path / "pcaps")]
        self.proc = self.launcher.spawn(argv, self.log_path.with_suffix(".out"))
        self._started()


class Bmv2Switch(_ProcessSwitch):
    """BMv2 simple_switch running the compiled agglab.p4 (JSON from agglab.emulation.p4build)."""

    def __init__(self, name, run: RunRecord, json_path: str, thrift_port: int,
                 device_id: int = 0, pcap: bool = False, **params):
        _ProcessSwitch.__init__(self, name, run, **params)
        self.json_path = json_path
        self.thrift_port = thrift_port
        self.device_id = device_id
        self.pcap = pcap

    def start(self, controllers):
        binary = bmv2_binary()

        with open(self.log_path.with_suffix(".out"), "a") as out:    # which build wrote these logs
            out.write(simple_switch_note() + "\n")
        if self.pcap:
            self.pcap_dir.mkdir(exist_ok=True)   # simple_switch refuses a --pcap directory that does not exist
        self._spawn(self.argv(binary))

    @property
    def pcap_dir(self) -> Path:
        return self.run.path / "pcaps"

    def argv(self, binary: str) -> list[str]:
        """simple_switch's command line (also what a cluster's server runs: emulation/cluster/nodes.py)."""
        # the notifications socket defaults to /tmp/bmv2-<device>-notifications.ipc, shared by
        # every simple_switch on the machine: another run's switch would stop ours from starting
        ipc = f"{self.run.path}/{self.name}-notifications.ipc"
        if len(ipc.encode()) > SUN_PATH_MAX:      # simple_switch aborts (SIGABRT) on a longer one
            raise Refused(f"BMv2's notification socket {ipc} is longer than a socket address allows "
                               f"({SUN_PATH_MAX} bytes): give AGGLAB_RUN_ROOT a shorter directory")
        argv = [binary, "--device-id", str(self.device_id), "--thrift-port", str(self.thrift_port),
                "--notifications-addr", f"ipc://{ipc}",
                "--log-file", str(self.log_path.with_suffix("")), "--log-level",
                os.environ.get("AGGLAB_BMV2_LOG_LEVEL", "warn")]   # per-packet logging halves BMv2's rate
        for number, intf in sorted(self.data_ports().items()):
            argv += ["-i", f"{number}@{intf}"]
        if self.pcap:
            argv += ["--pcap", str(self.pcap_dir)]
        return argv + [self.json_path]


def bmv2_binary() -> str:
    """simple_switch's path here (a cluster's servers must have it at the same path)."""
    binary = find_bmv2_tool("simple_switch")
    if not binary:
        raise RuntimeError("simple_switch not found: install BMv2 (sudo scripts/provision-vm.sh, or the Vagrant VM) "
                           "or use --backend soft")
    return binary
