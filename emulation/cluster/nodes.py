"""agglab's host and software-switch nodes on a server of the cluster: Mininet's
`RemoteMixin` (the node's shell is `ssh ... sudo -E mnexec ...` over the server's multiplexed
connection) on top of the classes a one-machine network uses.

What changes on a server: the switch process (the software switch or BMv2's simple_switch) is started over ssh (no launcher to fork it:
its pidfds cannot cross machines), its exit is seen when that ssh exits (ssh returns the
remote exit code), and it is signalled by its pid on the server. A host's interfaces are
already in its namespace (the server's `ip -batch` made them there): Mininet must not try
to move them, least of all with an `ip link set ... netns PID` on the head, where that pid
means another process.
"""

from __future__ import annotations

import shlex
import signal
import subprocess
import sys

from mininet.examples.cluster import RemoteMixin
from mininet.node import Host

from agglab.emulation.cluster.remote import Remote, python_env_words
from agglab.emulation.switch_nodes import Bmv2Switch, SoftP4Switch, bmv2_binary
from agglab.ground.paths import IMPORT_ROOT


def _remote_kwargs(remote: Remote) -> dict:
    return dict(server=remote.server.address, user=remote.server.user, serverIP=remote.server.address,
                controlPath=remote.control_path)


class _OnServer(RemoteMixin):
    """RemoteMixin with the cluster's ssh options (keys, known hosts) on every shell."""

    def __init__(self, name, remote: Remote, **params):
        self.remote = remote
        self.sshbase = ["ssh", "-q", *remote.cluster.ssh_options(), "-o", "ForwardAgent=no", "-tt"]
        super().__init__(name, **_remote_kwargs(remote), **params)

    def addIntf(self, intf, port=None, moveIntfFn=None):
        # the interface was created where it belongs (emulation/cluster/network.py): nothing moves
        return super().addIntf(intf, port=port, moveIntfFn=lambda *_a, **_k: True)


class RemoteAggHost(_OnServer, Host):
    """A worker host on a server: its own network namespace there."""

    def worker_command(self, argv: list[str], env: dict[str, str], cwd: str, log: str, gate: bool) -> str:
        """The shell command that runs `argv` in this host's namespace on its server, with `env`
        and `cwd` (ssh forwards neither) and its output in `log` on the server. With `gate`,
        the start gate's two pipes are ssh's own stdout (ready) and stdin (go: end of file
        opens it): fds 3 and 4 (AGGLAB_START_FDS=3,4)."""
        env_words = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
        redirect = "3>&1 4<&0 " if gate else ""
        # `mnexec -a` only (no -d): as the ssh session's leader, -d would fork and exit at once
        return (f"cd {shlex.quote(cwd)} && {redirect}exec mnexec -a {self.pid} env {env_words} "
                f"{' '.join(shlex.quote(a) for a in argv)} >{shlex.quote(log)} 2>&1 </dev/null")


class RemoteProcess:
    """A process on a server, as Popen looks to its callers: `pid` is the head's ssh that runs
    it (what pidfds and waits use: ssh exits with the process and returns its exit code),
    `remote_pid` its pid on the server (what signals use; read from its pid file there when
    first needed, or handed over by `read_pids` for many at once)."""

    def __init__(self, remote: Remote, proc: subprocess.Popen, pidfile: str, args):
        self.remote, self.proc, self.pidfile, self.args = remote, proc, pidfile, args
        self._remote_pid: int | None = None

    @property
    def remote_pid(self) -> int:
        if self._remote_pid is None:
            read_pids([self])
        return self._remote_pid

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def returncode(self):
        return self.proc.returncode

    def poll(self):
        return self.proc.poll()

    def wait(self, timeout=None):
        return self.proc.wait(timeout)

    def send_signal(self, sig: int) -> None:
        if self.proc.poll() is None:
            self.remote.run(f"kill -{int(sig)} {self.remote_pid} 2>/dev/null; true", check=False)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


def read_pids(procs: list[RemoteProcess], timeout: float = 30.0) -> None:
    """The server pids of processes on one server, from their pid files, in one ssh (each
    ssh costs 0.1-0.2 s on a loaded machine: one per process made starting 20 switches 50 s)."""
    if not procs:
        return
    remote = procs[0].remote
    files = " ".join(shlex.quote(p.pidfile) for p in procs)
    tries = int(timeout / 0.05)
    r = remote.run(f"for i in $(seq {tries}); do ok=1; for f in {files}; do test -s $f || ok=; done; "
                   f"test -n \"$ok\" && break; sleep 0.05; done; for f in {files}; do echo $(cat $f 2>/dev/null || echo -); done",
                   check=False, timeout=timeout + 30)
    got = r.stdout.split()
    for p, word in zip(procs, got):
        if word.isdigit():
            p._remote_pid = int(word)
    missing = [p.args for p in procs if p._remote_pid is None]
    if missing:
        raise RuntimeError(f"did not start on {remote.server.name}: {', '.join(map(str, missing))}")


def start_remote(remote: Remote, command: str, pidfile: str, what: str, out=subprocess.DEVNULL,
                 stdin=subprocess.DEVNULL, preexec_fn=None) -> RemoteProcess:
    """Run shell `command` (which must end in an `exec`) on the server over ssh; its pid
    there is written to `pidfile` on the server first (RemoteProcess.remote_pid reads it)."""
    proc = remote.popen(f"echo $$ > {shlex.quote(pidfile)}; {command}", stdin=stdin, stdout=out,
                        stderr=subprocess.DEVNULL, start_new_session=True, preexec_fn=preexec_fn)
    return RemoteProcess(remote, proc, pidfile, what)


class _RemoteDataPlane:
    """What both data planes do the same way on a server: the process started over ssh
    (`command` ends in an exec), its pid file and log in the run directory there."""

    LOGS: tuple[str, ...] = ("", ".out")          # suffixes of log_path whose tails tell why it died

    def _start_on_server(self, command: str) -> None:
        self.proc = start_remote(self.remote, command, str(self.run.path / f"{self.name}.pid"),
                                 f"switch {self.name}")
        self.run.add_pid(self.proc.pid, f"{self.name} data plane (ssh to {self.remote.server.name})")

    def died(self) -> str | None:
        if self.proc is None or self.proc.poll() is None:
            return None
        files = " ".join(shlex.quote(str(self.log_path.with_suffix(x) if x else self.log_path)) for x in self.LOGS)
        tail = self.remote.run(f"tail -n 15 {files} 2>/dev/null; true", check=False)
        return (f"switch {self.name} on {self.remote.server.name} exited with code {self.proc.returncode}; "
                f"last lines of {self.log_path} there:\n{tail.stdout}")


class RemoteSoftSwitch(_RemoteDataPlane, _OnServer, SoftP4Switch):
    """The software switch on a server: `python -m agglab.softswitch` over ssh, in the server's root
    namespace, its control socket and log in the run directory there (the head reaches the
    socket through an ssh forward: emulation/cluster/network.py)."""

    def __init__(self, name, remote: Remote, run, seed: int = 0, pcap: bool = False, **params):
        super().__init__(name, remote=remote, run=run, launcher=None, seed=seed, pcap=pcap, **params)

    def start(self, controllers):
        argv = ["--name", self.name, "--control", str(self.control_path), "--log", str(self.log_path),
                "--seed", str(self.seed), "--no-prepare"]
        for number, intf in sorted(self.data_ports().items()):
            argv += ["--port", f"{number}={intf}"]
        if self.pcap:
            argv += ["--pcap-dir", str(self.run.path / "pcaps")]
        out = self.log_path.with_suffix(".out")
        self._start_on_server(f"cd {shlex.quote(str(IMPORT_ROOT))} && exec env {python_env_words(IMPORT_ROOT)} "
                              f"{shlex.quote(sys.executable)} -m agglab.softswitch {' '.join(shlex.quote(a) for a in argv)} "
                              f">>{shlex.quote(str(out))} 2>&1 </dev/null")


class RemoteBmv2Switch(_RemoteDataPlane, _OnServer, Bmv2Switch):
    """BMv2's simple_switch on a server, in its root namespace on the server's interfaces,
    with the program's JSON, its log and notifications socket in the run directory there
    (emulation/cluster/bmv2.py puts the JSON there). Its Thrift server listens on the server's
    address, where the head's client connects (`thrift_ip`); simple_switch is run from the
    path it has on the head (BMv2 is installed at the same path on every server)."""

    LOGS = ("", ".txt", ".out")                   # BMv2 logs to the name without the suffix

    def __init__(self, name, remote: Remote, run, json_path: str, thrift_port: int, device_id: int = 0,
                 pcap: bool = False, **params):
        super().__init__(name, remote=remote, run=run, json_path=json_path, thrift_port=thrift_port,
                         device_id=device_id, pcap=pcap, **params)

    @property
    def thrift_ip(self) -> str:
        return self.remote.server.address

    def start(self, controllers):
        out = shlex.quote(str(self.log_path.with_suffix(".out")))
        mkdir = f"mkdir -p {shlex.quote(str(self.pcap_dir))} && " if self.pcap else ""
        self._start_on_server(f"{mkdir}exec {' '.join(shlex.quote(a) for a in self.argv(bmv2_binary()))} "
                              f">>{out} 2>&1 </dev/null")
