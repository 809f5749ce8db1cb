"""`agglab cluster`: a practice cluster on this machine, and a check of a cluster file.

    agglab cluster local up --servers 2 [--file cluster.yaml] [--cores 1]
    agglab cluster local down
    agglab cluster check FILE
"""

from __future__ import annotations

import os
import sys


def add_cluster_parser(sub) -> None:
    c = sub.add_parser("cluster", help="cluster mode: a practice cluster on this machine "
                       "(`cluster local up|down`), or check a cluster file's servers (`cluster check FILE`)")
    csub = c.add_subparsers(dest="cluster_cmd", required=True)
    local = csub.add_parser("local", help="N namespaced servers on this machine, each with its own sshd")
    lsub = local.add_subparsers(dest="local_cmd", required=True)
    up = lsub.add_parser("up", help="build the practice servers and write a cluster file")
    up.add_argument("--servers", type=int, default=2, help="how many servers (1..16, default 2)")
    up.add_argument("--file", default=None, help="where to write the cluster file "
                    "(default /var/lib/agglab-cluster-local/cluster.yaml); `down` removes it")
    up.add_argument("--cores", type=int, default=None, help="cores to write for each server (informational)")
    up.set_defaults(func=_local_up)
    down = lsub.add_parser("down", help="remove the practice servers: processes, namespaces, "
                           "interfaces, keys and the cluster file")
    down.set_defaults(func=_local_down)
    check = csub.add_parser("check", help="ssh, sudo, mnexec, python and VXLAN on every server of FILE")
    check.add_argument("file", help="the cluster file (YAML list of servers)")
    check.set_defaults(func=_check)


def _root(what: str) -> bool:
    if os.geteuid() != 0:
        print(f"agglab cluster {what} needs root (namespaces, bridge, sshd): run it with sudo", file=sys.stderr)
        return False
    return True


def _local_up(args) -> int:
    from agglab.emulation.cluster import practice  # lazy: loads PyYAML, only _local_up() needs it

    if not _root("local up"):
        return 2
    if args.cores is not None and args.cores < 1:
        print("agglab cluster local up: --cores must be at least 1", file=sys.stderr)
        return 2
    try:
        path = practice.up(args.servers, args.file, cores=args.cores,
                           log=lambda m: print(f"[agglab] {m}", file=sys.stderr, flush=True))
    except practice.PracticeClusterError as exc:
        print(f"agglab cluster local up: {exc}", file=sys.stderr)
        return 2
    print(path)
    return 0


def _local_down(args) -> int:
    from agglab.emulation.cluster import practice  # lazy: loads PyYAML, only _local_down() needs it

    if not _root("local down"):
        return 2
    for what in practice.down():
        print(f"removed {what}", file=sys.stderr)
    return 0


def _check(args) -> int:
    from agglab.ground.cluster_file import ClusterFileError, load  # lazy: loads PyYAML, only _check() needs it
    from agglab.emulation.cluster.remote import precheck  # lazy: loads PyYAML, only _check() needs it

    try:
        cluster = load(args.file)
    except ClusterFileError as exc:
        print(f"agglab cluster check: {exc}", file=sys.stderr)
        return 2
    problems = precheck(cluster)
    for server in cluster.servers:
        print(f"{server.name} {server.user}@{server.address}: {problems.get(server.name) or 'ok'}")
    return 1 if problems else 0
