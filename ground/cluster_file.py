"""The cluster file: which servers a network may use and how to reach them.

A YAML file, either a plain list of servers or a mapping with `servers:` and an optional
`ssh_config:` (an ssh_config(5) file every ssh to the servers uses: keys, known hosts, ports).
Each server: `address` (what ssh connects to, an IPv4 address: VXLAN tunnels between servers
use it as their underlay address), `user` (default root), optional `name` and `cores`.

    ssh_config: /var/lib/agglab-cluster-local/ssh_config
    servers:
      - {name: s1, address: 172.31.213.2, user: root, cores: 1}
      - {name: s2, address: 172.31.213.3, user: root}
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from pathlib import Path

import yaml


class ClusterFileError(ValueError):
    """A cluster file that cannot be used (one line: the CLI prints it and exits 2)."""


@dataclass(frozen=True)
class Server:
    name: str
    address: str
    user: str = "root"
    cores: int | None = None


@dataclass(frozen=True)
class Cluster:
    servers: tuple[Server, ...]
    ssh_config: str | None = None
    path: str | None = None
    extra: dict = field(default_factory=dict, compare=False)

    def ssh_options(self) -> list[str]:
        """What every ssh to a server adds: the cluster's ssh_config, no questions asked."""
        opts = ["-o", "BatchMode=yes"]
        if self.ssh_config:
            opts = ["-F", self.ssh_config, *opts]
        return opts

    def by_name(self, name: str) -> Server:
        for s in self.servers:
            if s.name == name:
                return s
        raise KeyError(name)


def _server(i: int, entry, where: str) -> Server:
    if not isinstance(entry, dict):
        raise ClusterFileError(f"{where}: server {i + 1} is not a mapping (address:, user:, cores:)")
    unknown = set(entry) - {"name", "address", "user", "cores"}
    if unknown:
        raise ClusterFileError(f"{where}: server {i + 1} has unknown keys {sorted(unknown)}")
    address = str(entry.get("address", ""))
    try:
        ipaddress.IPv4Address(address)
    except ValueError:
        raise ClusterFileError(f"{where}: server {i + 1}: address {address!r} is not an IPv4 address "
                               "(tunnels between servers use it as their underlay address)") from None
    cores = entry.get("cores")
    if cores is not None and (not isinstance(cores, int) or cores < 1):
        raise ClusterFileError(f"{where}: server {i + 1}: cores must be a positive integer, got {cores!r}")
    return Server(name=str(entry.get("name") or f"server{i + 1}"), address=address,
                  user=str(entry.get("user") or "root"), cores=cores)


def load(path: str | Path) -> Cluster:
    """Read and check a cluster file; ClusterFileError names what is wrong."""
    p = Path(path)
    try:
        data = yaml.safe_load(p.read_text())
    except OSError as exc:
        raise ClusterFileError(f"cluster file {p}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise ClusterFileError(f"cluster file {p}: not text (not UTF-8)") from None
    except yaml.YAMLError as exc:
        raise ClusterFileError(f"cluster file {p}: not YAML ({str(exc).splitlines()[0]})") from None
    ssh_config = None
    if isinstance(data, dict):
        ssh_config = data.get("ssh_config")
        data = data.get("servers")
    if not isinstance(data, list) or not data:
        raise ClusterFileError(f"cluster file {p}: needs a non-empty list of servers")
    servers = tuple(_server(i, e, f"cluster file {p}") for i, e in enumerate(data))
    names = [s.name for s in servers]
    if len(set(names)) != len(names) or len({s.address for s in servers}) != len(servers):
        raise ClusterFileError(f"cluster file {p}: server names and addresses must be unique")
    if ssh_config is not None and not Path(ssh_config).is_file():
        raise ClusterFileError(f"cluster file {p}: ssh_config {ssh_config} does not exist")
    return Cluster(servers=servers, ssh_config=str(ssh_config) if ssh_config else None, path=str(p))


def dump(cluster: Cluster, path: str | Path) -> None:
    servers = [{k: v for k, v in (("name", s.name), ("address", s.address), ("user", s.user),
                                  ("cores", s.cores)) if v is not None} for s in cluster.servers]
    data = {"servers": servers}
    if cluster.ssh_config:
        data = {"ssh_config": cluster.ssh_config, **data}
    Path(path).write_text(yaml.safe_dump(data, sort_keys=False))
