"""A practice cluster on one machine: N namespaced "servers", each with its own sshd.

Why: cluster mode must be tried (and tested in CI) before anyone rents machines, and a test
can only prove that nothing leaks between servers and nothing is left after teardown if the
servers really are apart. Mininet's idea (fakecluster): each server is its own network, PID
and mount namespace, so the head cannot see its processes, its /tmp and /run (private tmpfs)
or its interfaces (/sys remounted by `ip netns exec`), and it is reached only over ssh, on
a bridge in the root namespace.

Layout (one practice cluster per machine):
- bridge `aglcbr0` with 172.31.213.1/24; server i is 172.31.213.(i+1) on its `eth0`, a veth
  whose other end `aglc<i>` hangs on the bridge. The range exists only on this bridge:
  nothing is routed or forwarded anywhere else.
- server i's network namespace is `agglab-c<i>` (`ip netns`); in it `unshare --pid --mount
  --fork --mount-proc --kill-child` runs the server's sshd as PID 1 of its PID namespace, so
  killing it ends every process the server ever ran.
- STATE_DIR (not under /tmp or /run: the servers read it through their own mounts) holds a
  client key, each server's host key and sshd_config, known_hosts, an ssh_config, the
  servers' pids and the cluster file.

`down()` kills each server's PID 1, deletes the namespaces, the veths, the bridge and the
state directory, and the cluster file if it was written elsewhere.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

from agglab.ground.cluster_file import Cluster, Server, dump
from agglab.ground.netnames import CLUSTER

STATE_DIR = Path(os.environ.get("AGGLAB_CLUSTER_DIR", "/var/lib/agglab-cluster-local"))
BRIDGE = "aglcbr0"
SUBNET = "172.31.213"                 # /24, on BRIDGE only
NETNS_PREFIX = CLUSTER.prefix         # no process owns them: `agglab clean` leaves them (ground/netnames.py)
VETH_PREFIX = "aglc"
MAX_SERVERS = 16

SSHD_CONFIG = """\
ListenAddress {address}
Port 22
HostKey {host_key}
AuthorizedKeysFile {authorized_keys}
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
UseDNS no
PidFile none
# many node shells start at once over one multiplexed connection
MaxSessions 1000
MaxStartups 1000:30:2000
AllowTcpForwarding yes
AllowStreamLocalForwarding yes
StreamLocalBindUnlink yes
PermitTunnel no
X11Forwarding no
PrintMotd no
AcceptEnv AGGLAB_*
Subsystem sftp internal-sftp
"""

# PID 1 of a server: private /tmp and /run, then sshd (which reaps what is orphaned there).
# The head runs agglab from its checkout's path on every server (a real cluster installs it
# at the same path); a checkout under /tmp or /run would be hidden by the private tmpfs, so
# it is bind-mounted through a staging directory in the state directory first.
SERVER_INIT = """\
set -e
{keep_code}mount -t tmpfs -o mode=1777 agglab-tmp /tmp
mount -t tmpfs -o mode=755 agglab-run /run
{restore_code}mkdir -p /run/sshd
exec /usr/sbin/sshd -D -e -f {config}
"""
CODE = Path(__file__).resolve().parents[2]     # the checkout (or installed tree) the head runs


def server_init(config: Path, staging: Path, code: Path = CODE) -> str:
    """SERVER_INIT for one server: `code` kept visible at its own path if /tmp or /run hold it."""
    hidden = any(code == Path(top) or Path(top) in code.parents for top in ("/tmp", "/run"))
    if not hidden:
        return SERVER_INIT.format(keep_code="", restore_code="", config=config)
    q = lambda p: "'" + str(p).replace("'", "'\\''") + "'"
    return SERVER_INIT.format(
        keep_code=f"mkdir -p {q(staging)}\nmount --bind {q(code)} {q(staging)}\n",
        restore_code=f"mkdir -p {q(code)}\nmount --bind {q(staging)} {q(code)}\n", config=config)


class PracticeClusterError(RuntimeError):
    """The practice cluster cannot be built or removed (one line for the CLI)."""


def _run(argv: list[str], input: str | None = None, check: bool = True) -> subprocess.CompletedProcess:
    r = subprocess.run(argv, input=input, text=True, capture_output=True)
    if check and r.returncode != 0:
        raise PracticeClusterError(f"{' '.join(argv[:4])}...: {(r.stderr or r.stdout).strip()[:300]}")
    return r


def server_address(i: int) -> str:
    return f"{SUBNET}.{i + 1}"


def netns_name(i: int) -> str:
    return f"{NETNS_PREFIX}{i}"


def veth_name(i: int) -> str:
    return f"{VETH_PREFIX}{i}"


def is_up(state_dir: Path = STATE_DIR) -> bool:
    return (state_dir / "state.json").exists()


def up(servers: int, cluster_file: str | Path | None = None, state_dir: Path = STATE_DIR,
       cores: int | None = None, log=None) -> Path:
    """Build `servers` practice servers and write the cluster file (default
    STATE_DIR/cluster.yaml); returns its path. Anything half-built is removed on failure."""
    if not 1 <= servers <= MAX_SERVERS:
        raise PracticeClusterError(f"--servers must be 1..{MAX_SERVERS}, got {servers}")
    if is_up(state_dir) or Path(f"/sys/class/net/{BRIDGE}").exists():
        raise PracticeClusterError(f"a practice cluster is already up ({state_dir}); "
                                   "run `agglab cluster local down` first")
    for tool in ("sshd", "ssh", "ssh-keygen", "unshare", "ip"):
        if not shutil.which(tool) and not Path(f"/usr/sbin/{tool}").exists():
            raise PracticeClusterError(f"{tool} not found: install openssh-server, openssh-client, util-linux "
                                       "and iproute2 (scripts/install-system.sh)")
    say = log or (lambda _m: None)
    state_dir.mkdir(parents=True, exist_ok=True)
    os.chmod(state_dir, 0o700)
    cluster_path = Path(cluster_file) if cluster_file else state_dir / "cluster.yaml"
    state = {"servers": servers, "pids": {}, "cluster_file": str(cluster_path.resolve())}
    _save(state_dir, state)                          # down() can undo from here on
    try:
        _keys(state_dir, servers)
        _run(["ip", "-batch", "-"], input=f"link add {BRIDGE} type bridge\n"
                                          f"addr add {SUBNET}.1/24 dev {BRIDGE}\nlink set {BRIDGE} up\n")
        for i in range(1, servers + 1):
            say(f"server {i}: {server_address(i)}")
            state["pids"][str(i)] = _start_server(state_dir, i)
            _save(state_dir, state)
        _wait_ssh(state_dir, servers)
        cluster = Cluster(servers=tuple(Server(name=f"s{i}", address=server_address(i), user="root", cores=cores)
                                        for i in range(1, servers + 1)),
                          ssh_config=str(state_dir / "ssh_config"))
        cluster_path.parent.mkdir(parents=True, exist_ok=True)
        dump(cluster, cluster_path)
    except BaseException:
        down(state_dir)
        raise
    return cluster_path


def _save(state_dir: Path, state: dict) -> None:
    (state_dir / "state.json").write_text(json.dumps(state, indent=1))


def _keys(state_dir: Path, servers: int) -> None:
    """A client key (authorized on every server), a host key per server, known_hosts
    pre-filled (BatchMode refuses unknown hosts) and an ssh_config naming them."""
    key = state_dir / "id_ed25519"
    _run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "agglab-practice-cluster", "-f", str(key)])
    shutil.copy(f"{key}.pub", state_dir / "authorized_keys")
    known = []
    for i in range(1, servers + 1):
        d = state_dir / f"s{i}"
        d.mkdir()
        host_key = d / "ssh_host_ed25519_key"
        _run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"s{i}", "-f", str(host_key)])
        known.append(f"{server_address(i)} {Path(f'{host_key}.pub').read_text().split(' ')[0]} "
                     f"{Path(f'{host_key}.pub').read_text().split(' ')[1]}")
        (d / "sshd_config").write_text(SSHD_CONFIG.format(address=server_address(i), host_key=host_key,
                                                          authorized_keys=state_dir / "authorized_keys"))
    (state_dir / "known_hosts").write_text("\n".join(known) + "\n")
    (state_dir / "ssh_config").write_text(
        f"Host {SUBNET}.*\n"
        f"  IdentityFile {key}\n  IdentitiesOnly yes\n  UserKnownHostsFile {state_dir / 'known_hosts'}\n"
        "  StrictHostKeyChecking yes\n  GlobalKnownHostsFile /dev/null\n  LogLevel ERROR\n"
        "  ConnectTimeout 10\n  ServerAliveInterval 15\n")


def _start_server(state_dir: Path, i: int) -> dict:
    """Server i's namespaces, link to the bridge and sshd; returns its pids (unshare, PID 1)."""
    ns, veth, d = netns_name(i), veth_name(i), state_dir / f"s{i}"
    _run(["ip", "netns", "add", ns])
    _run(["ip", "-batch", "-"], input=(
        f"link add {veth} type veth peer name {veth}p\nlink set {veth}p netns {ns}\n"
        f"link set {veth} master {BRIDGE}\nlink set {veth} up\n"))
    _run(["ip", "-n", ns, "-batch", "-"], input=(
        f"link set {veth}p name eth0\naddr add {server_address(i)}/24 dev eth0\n"
        "link set eth0 up\nlink set lo up\n"))
    with open(d / "sshd.log", "ab") as out:
        proc = subprocess.Popen(["ip", "netns", "exec", ns, "unshare", "--pid", "--mount", "--fork",
                                 "--mount-proc", "--kill-child", "--propagation", "private",
                                 "sh", "-c", server_init(d / "sshd_config", d / "code")],
                                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
    init = None
    for _ in range(100):
        children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children")
        try:
            kids = children.read_text().split()
        except OSError:
            kids = []
        if kids:
            init = int(kids[0])
            break
        if proc.poll() is not None:
            break
        time.sleep(0.02)
    if init is None:
        raise PracticeClusterError(f"server {i} did not start: {(d / 'sshd.log').read_text()[-300:]}")
    return {"unshare": proc.pid, "init": init}


def ssh_argv(state_dir: Path, address: str, *command: str) -> list[str]:
    return ["ssh", "-F", str(state_dir / "ssh_config"), "-o", "BatchMode=yes", f"root@{address}", *command]


def _wait_ssh(state_dir: Path, servers: int, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    for i in range(1, servers + 1):
        while True:
            r = subprocess.run(ssh_argv(state_dir, server_address(i), "true"), capture_output=True, text=True,
                               stdin=subprocess.DEVNULL)
            if r.returncode == 0:
                break
            if time.monotonic() > deadline:
                raise PracticeClusterError(f"server {i}: ssh did not answer within {timeout:.0f} s: "
                                           f"{r.stderr.strip()[:200]}; sshd log: "
                                           f"{(state_dir / f's{i}' / 'sshd.log').read_text()[-300:]}")
            time.sleep(0.1)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False


def down(state_dir: Path = STATE_DIR) -> list[str]:
    """Remove the practice cluster: every server's processes (PID 1 of its PID namespace,
    which takes all of them along), namespaces, veths, the bridge, the state directory and
    the cluster file. Idempotent; returns what it removed."""
    removed = []
    try:
        state = json.loads((state_dir / "state.json").read_text())
    except (OSError, ValueError):
        state = {"servers": MAX_SERVERS, "pids": {}}
    for i, pids in state.get("pids", {}).items():
        for key in ("init", "unshare"):              # init first: the whole PID namespace dies
            pid = pids.get(key)
            if pid and _alive(pid) and _is_ours(pid, key):
                os.kill(pid, signal.SIGKILL)
                removed.append(f"server {i} {key} pid {pid}")
        for key in ("init", "unshare"):
            pid = pids.get(key)
            deadline = time.monotonic() + 5
            while pid and _alive(pid) and time.monotonic() < deadline:
                try:                                   # our child when up() ran in this process
                    os.waitpid(pid, os.WNOHANG)
                except ChildProcessError:
                    pass
                time.sleep(0.02)
    existing = set(_run(["ip", "netns", "list"], check=False).stdout.split())
    for i in range(1, int(state.get("servers", MAX_SERVERS)) + 1):
        if netns_name(i) in existing:
            _run(["ip", "netns", "del", netns_name(i)], check=False)
            removed.append(f"namespace {netns_name(i)}")
        if Path(f"/sys/class/net/{veth_name(i)}").exists():
            _run(["ip", "link", "del", veth_name(i)], check=False)
            removed.append(f"interface {veth_name(i)}")
    if Path(f"/sys/class/net/{BRIDGE}").exists():
        _run(["ip", "link", "del", BRIDGE], check=False)
        removed.append(f"bridge {BRIDGE}")
    cluster_file = state.get("cluster_file")
    if cluster_file and Path(cluster_file).exists() and not Path(cluster_file).is_relative_to(state_dir):
        Path(cluster_file).unlink()
        removed.append(f"file {cluster_file}")
    if state_dir.exists():
        shutil.rmtree(state_dir)
        removed.append(f"directory {state_dir}")
    return removed


def _is_ours(pid: int, key: str) -> bool:
    """Never kill a recycled pid: the process must still be a practice server's."""
    try:
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    text = b" ".join(cmd)
    return (b"sshd" in text and b"sshd_config" in text) if key == "init" else b"unshare" in text
