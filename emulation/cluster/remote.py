"""ssh to the servers of a cluster: one multiplexed connection per server (ControlMaster,
as Mininet's RemoteMixin uses it), commands in the server's root namespace, files both ways.

Why not a remote-procedure layer of our own: everything the head does on a server is a
shell command over the same multiplexed ssh connection Mininet's remote nodes use, and files
travel as tar streams over it.
"""

from __future__ import annotations

import io
import os
import shlex
import subprocess
import sys
import tarfile
from pathlib import Path

from agglab.ground.cluster_file import Cluster, Server
from agglab.ground.paths import REPO

SSH_BASE = ["ssh", "-q", "-o", "BatchMode=yes", "-o", "ServerAliveInterval=15"]


def agglab_env(env) -> dict[str, str]:
    """The AGGLAB_* settings of `env`: what a process started over ssh must be given (ssh
    passes no environment), for switches, agents and workers alike."""
    return {k: v for k, v in env.items() if k.startswith("AGGLAB_")}


def python_env_words(repo: Path | str) -> str:
    """`env` words for an agglab process started over ssh: PYTHONPATH and this process's
    AGGLAB_* settings. Why: ssh passes no environment, and a switch on a server must run the
    same program variant (AGGLAB_K) as the workers on the head's plan, or every frame of the
    wide variant is refused there for its length."""
    words = {"PYTHONPATH": str(repo), **agglab_env(os.environ)}
    return " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(words.items()))


class Remote:
    """One server's ssh connection (a ControlMaster socket under `control_dir`)."""

    def __init__(self, cluster: Cluster, server: Server, control_dir: Path):
        self.cluster, self.server = cluster, server
        self.control_path = str(control_dir / f"ssh-{server.name}")
        self.dest = f"{server.user}@{server.address}"

    def ssh_options(self) -> list[str]:
        """ssh options (no command, no destination) on the shared connection."""
        opts = [*self.cluster.ssh_options(), "-o", "ServerAliveInterval=15"]
        return [*opts, "-o", f"ControlPath={self.control_path}", "-o", "ControlMaster=auto",
                "-o", "ControlPersist=60"]

    def argv(self, command: str, sudo: bool = False) -> list[str]:
        """ssh argv running shell `command` on the server (as root through sudo if asked)."""
        if sudo and self.server.user != "root":
            command = f"sudo -n sh -c {shlex.quote(command)}"
        return ["ssh", "-q", *self.ssh_options(), self.dest, command]

    def run(self, command: str, input: str | bytes | None = None, check: bool = True,
            timeout: float = 120) -> subprocess.CompletedProcess:
        text = not isinstance(input, bytes)
        r = subprocess.run(self.argv(command, sudo=True), input=input, capture_output=True, text=text,
                           timeout=timeout, stdin=None if input is not None else subprocess.DEVNULL)
        if check and r.returncode != 0:
            err = r.stderr if text else r.stderr.decode(errors="replace")
            out = r.stdout if text else r.stdout.decode(errors="replace")
            raise RuntimeError(f"on {self.server.name} ({self.server.address}): {command[:120]!r} failed "
                               f"({r.returncode}): {(err or out).strip()[:400]}")
        return r

    def popen(self, command: str, **kwargs) -> subprocess.Popen:
        return subprocess.Popen(self.argv(command, sudo=True), **kwargs)

    def put(self, paths: list[Path]) -> None:
        """Copy local files to the same absolute paths on the server (one tar stream)."""
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tar:
            for p in paths:
                tar.add(str(p), arcname=str(p).lstrip("/"), recursive=False)
        self.run("tar -C / -xf -", input=buf.getvalue())

    def get(self, directory: Path, pattern: str = "*") -> list[Path]:
        """Copy the server's files `directory/pattern` to the same paths here; returns them."""
        r = self.run(f"cd {shlex.quote(str(directory))} 2>/dev/null && tar -cf - {pattern} 2>/dev/null; true",
                     input=b"", check=False)
        if not r.stdout:
            return []
        got = []
        with tarfile.open(fileobj=io.BytesIO(r.stdout), mode="r") as tar:
            for m in tar.getmembers():
                if m.isfile():
                    data = tar.extractfile(m).read()
                    target = directory / m.name
                    target.write_bytes(data)
                    got.append(target)
        return got

    def close(self) -> None:
        subprocess.run(["ssh", *self.ssh_options(), "-O", "exit", self.dest], capture_output=True,
                       stdin=subprocess.DEVNULL, timeout=10)


PRECHECK = ("sudo -n true || echo 'no passwordless sudo'; command -v mnexec >/dev/null || echo 'no mnexec "
            "(install mininet)'; test -x {python} || echo 'no {python} (same checkout path on every server)'; "
            "test -d {repo} || echo 'no {repo}'; sudo -n ip link add aglvxchk type vxlan id 16777000 dstport 4789 "
            "local {address} 2>/dev/null && sudo -n ip link del aglvxchk || echo 'no VXLAN in the kernel'")


def precheck(cluster: Cluster, python: str | None = None, repo: str | None = None) -> dict[str, str]:
    """What is wrong with each server (as `MininetCluster.precheck` does: ssh and sudo first,
    then what agglab needs there); {} when every server is ready."""
    problems = {}
    for server in cluster.servers:
        cmd = PRECHECK.format(python=python or sys.executable, repo=repo or REPO, address=server.address)
        try:
            r = subprocess.run(["ssh", *cluster.ssh_options(), "-o", "ConnectTimeout=10", f"{server.user}@{server.address}", cmd],
                               capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            problems[server.name] = "ssh timed out"
            continue
        if r.returncode == 255:
            problems[server.name] = f"ssh failed (exit 255): {r.stderr.strip()[:200] or 'no answer'}"
        elif r.stdout.strip():
            problems[server.name] = "; ".join(r.stdout.split("\n")).strip("; ")
    return problems
