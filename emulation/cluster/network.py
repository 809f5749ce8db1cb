"""A network spread over the servers of a cluster (Mininet's cluster edition pieces).

The controller, the job and the session stay on the head; each server runs its share of
the switches (software switches, or BMv2's simple_switch: bmv2.py) and worker hosts (placement.py: SwitchBinPlacer, hosts with their
edge switch). Links inside a server are veth pairs made there in one `ip -batch`, as on one
machine; a link between two servers is a VXLAN tunnel (links.py), one VNI per link, whose
ends stay in the servers' root namespaces where the switches are. What assumed one machine,
and what replaces it here:

- the switches' control sockets are Unix sockets in the run directory on their server: one
  `ssh -N -L local:remote ...` per server forwards them to the same paths on the head, so
  the controller's clients are unchanged (their SO_PEERCRED pid would be ssh's: `pids()`
  answers none, and a reroute does not raise a remote switch's priority);
- switch processes are started over ssh (nodes.py), watched through that ssh (it exits with
  the switch) and signalled by their pid on the server;
- the epoch files the controller writes on the head are pushed to every server as they
  change, and the workers' progress files come back, through one agent per server
  (agent.py) on the same ssh connection; worker reports and logs are fetched once they exit;
- a worker's environment, directory and start gate travel in its ssh command (the gate's two
  pipes are that ssh's stdin and stdout);
- link changes: each server's agent watches its root namespace's link ends with netlink
  and forwards every change to the head (dated when it arrives there); a link the head itself
  takes down is also told to the job at once, without waiting for the forward (`watch_links`);
- the fidelity probe's counters and CPU are on the servers: each agent samples its own and
  the head merges them, adding the tunnels' loss (fidelity.py).
Clean-up kills every pid recorded in the run directory on each server, deletes the run's
interface group there and removes that directory; the head's own ssh processes end with it.
"""

from __future__ import annotations

import queue
import random
import shlex
import signal
import subprocess
import threading
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path

from mininet.link import TCLink
from mininet.log import setLogLevel
from mininet.net import Mininet

from agglab.controller.bmv2_client import Bmv2Client
from agglab.controller.switch_client import SoftSwitchClient, SwitchClient
from agglab.controller.topology import hosts, switches
from agglab.emulation.cluster import links as tunnels
from agglab.emulation.cluster.agent import AgentLink
from agglab.emulation.cluster import bmv2
from agglab.emulation.cluster.fidelity import ClusterProbe
from agglab.emulation.cluster.nodes import RemoteAggHost, RemoteBmv2Switch, RemoteSoftSwitch, read_pids, start_remote
from agglab.emulation.cluster.placement import crossing, place
from agglab.emulation.cluster.remote import Remote, agglab_env
from agglab.emulation.command_log import LoggedClient
from agglab.emulation.cluster.hangs import ClusterHangs
from agglab.emulation.veths import PrebuiltLink, QuietIntf
from agglab.ground.cluster_file import Cluster
from agglab.emulation.network import THRIFT_BASE, EmulatedNetwork
from agglab.ground import addresses
from agglab.ground.cleanup import clean
from agglab.ground.rundir import RunRecord, kill_pids
from agglab.ground.start_gate import END_ENV


class ForwardedClient(SoftSwitchClient):
    """A software switch's client over an ssh-forwarded socket: the peer pid the kernel
    reports is the forwarding ssh's, not the switch's, so it names none."""

    def pids(self) -> list[int]:
        return []


class _HostView:
    """What the session and the failure injector use of a host node, with `pid` the head's
    ssh process for its shell (a pid here means a process here: the node's own `pid` is its
    shell's on the server)."""

    def __init__(self, node):
        self._node = node

    @property
    def pid(self) -> int:
        return self._node.shell.pid

    def __getattr__(self, name):
        return getattr(self._node, name)


class ClusterNetwork(ClusterHangs, EmulatedNetwork):
    """EmulatedNetwork whose nodes run on the servers of `cluster`."""


    def __init__(self, graph, cluster: Cluster, backend: str = "soft", **kwargs):
        super().__init__(graph, backend=backend, **kwargs)
        self.cluster = cluster
        self.placement: dict[str, str] = {}
        self.remotes: dict[str, Remote] = {}
        self.forwarders: list[subprocess.Popen] = []
        self.agents: dict[str, AgentLink] = {}
        self.group = random.randint(1000, 60000)      # the run's interface group on every server
        self.vni_base = random.randint(1, 1 << 20) << 3
        self._pushed: set[tuple[str, str]] = set()

    # -- lifecycle ----------------------------------------------------------------
    def start(self) -> "ClusterNetwork":
        setLogLevel("error")
        with self.phases.timed("old runs cleaned"):
            clean(verbose=False)
        try:
            with self.phases.timed("servers"):
                self.run = RunRecord.create("net")
                self.placement = place(self.graph, [s.name for s in self.cluster.servers])
                self.remotes = {s.name: Remote(self.cluster, s, self.run.path) for s in self.cluster.servers}
                self._each_server(lambda r: r.run(f"mkdir -p {shlex.quote(str(self.run.path))}"))
                self.net = Mininet(topo=None, build=False, controller=None, autoSetMacs=False,
                                   autoStaticArp=False, link=TCLink)
            self._build()                 # the shared steps (emulation/network.py), on the servers
            with self.phases.timed("agents"):
                for name, remote in self.remotes.items():
                    self.agents[name] = AgentLink(remote, self.run.path).start()
                    self.run.add_pid(self.agents[name].proc.pid, f"agent on {name} (ssh)")
        except BaseException:
            self.stop()
            raise
        return self

    def _each_server(self, fn, servers=None) -> list:
        """fn(remote) on each of `servers` (default: every server) at once; an empty list is none."""
        names = list(self.remotes if servers is None else servers)
        with ThreadPoolExecutor(max_workers=max(1, len(names))) as pool:
            return list(pool.map(lambda n: fn(self.remotes[n]), names))

    def _add_nodes(self) -> None:
        g = self.graph
        makers = {}
        for h in hosts(g):
            a = g.nodes[h]
            makers[h] = partial(RemoteAggHost, h, remote=self.remotes[self.placement[h]],
                                ip=f"{a['ip']}/{addresses.PREFIX_LEN}", mac=a["mac"])
        json_path = bmv2.ship_program(self) if self.backend == "bmv2" else None
        for i, s in enumerate(switches(g)):
            if self.backend == "bmv2":
                makers[s] = partial(RemoteBmv2Switch, s, remote=self.remotes[self.placement[s]], inNamespace=False,
                                    run=self.run, json_path=json_path, thrift_port=THRIFT_BASE + i, device_id=i,
                                    pcap=self.pcap)
            else:
                makers[s] = partial(RemoteSoftSwitch, s, remote=self.remotes[self.placement[s]], inNamespace=False,
                                    run=self.run, seed=self.seed + i, pcap=self.pcap)
        # the first shell on each server opens its multiplexed connection alone
        first = {}
        for name in makers:
            first.setdefault(self.placement[name], name)
        made = {}
        for name in first.values():
            made[name] = makers[name]()
        pool = ThreadPoolExecutor(max_workers=min(16, len(makers)), thread_name_prefix="remote-node")
        futures = {name: pool.submit(makers[name]) for name in makers if name not in made}
        try:
            for name, future in futures.items():
                made[name] = future.result()
        finally:
            pool.shutdown(wait=True, cancel_futures=True)
            for name, future in futures.items():
                if future.done() and not future.cancelled() and future.exception() is None:
                    made[name] = future.result()
            for name in makers:                           # graph order, as one machine adds them
                node = made.get(name)
                if node is None:
                    continue
                self.run.add_pid(node.shell.pid, f"{name} shell (ssh to {self.placement[name]})")
                add = self.net.addHost if g.nodes[name]["kind"] == "host" else self.net.addSwitch
                add(name, cls=lambda _name, _node=node, **_params: _node)

    def _add_links(self) -> None:
        g = self.graph
        self.tunnels = crossing(g, self.placement)
        per_server = tunnels.server_lines(g, self.placement, {n: self.net.get(n).pid for n in g.nodes},
                                          {s.name: s.address for s in self.cluster.servers}, self.group,
                                          self.vni_base, veth_offloads_off=self.backend == "soft")
        self._each_server(lambda r: tunnels.apply(r, per_server[r.server.name]))
        for u, v, e in g.edges(data=True):
            self.net.addLink(u, v, port1=e["ports"][u], port2=e["ports"][v], cls=PrebuiltLink,
                             intfName1=e["intfs"][u], intfName2=e["intfs"][v], addr1=None, addr2=None,
                             intf=QuietIntf)

    def _start_switches(self) -> None:
        """Every switch's ssh at once, then each server's pid files in one read."""
        for node in self.net.switches:
            node.start([])
        by_server: dict[str, list] = {}
        for node in self.net.switches:
            by_server.setdefault(self.placement[node.name], []).append(node.proc)
        self._each_server(lambda r: read_pids(by_server.get(r.server.name, [])))

    def _extra_host_lines(self, intfs: list[str]) -> list[str]:
        """An MTU that fits the tunnels on every NIC of a host."""
        return [f"link set dev {i} mtu {tunnels.MTU}" for i in intfs]

    def _ship_host_scripts(self, scripts: dict) -> None:
        """Copy each host's set-up script to its server, one put per server."""
        by_server: dict[str, list[Path]] = {name: [] for name in self.remotes}
        for h, script in scripts.items():
            by_server[self.placement[h]].append(script)
        self._each_server(lambda r: r.put(by_server[r.server.name]) if by_server[r.server.name] else None)

    def _connect_switches(self) -> None:
        """The software switches' control sockets are on their servers: forward them to the
        head first (BMv2's Thrift servers are reached at their servers' addresses)."""
        if self.backend == "soft":
            self._forward_sockets()
        super()._connect_switches()

    def _forward_sockets(self) -> None:
        """Each server's switch control sockets, once they exist there, forwarded to the same
        paths on the head (one ssh per server, on the shared connection)."""
        by_server: dict[str, list[str]] = {}
        for s in switches(self.graph):
            by_server.setdefault(self.placement[s], []).append(str(self.net.get(s).control_path))

        def wait_and_forward(remote: Remote):
            paths = by_server.get(remote.server.name, [])
            if not paths:
                return None
            waits = " && ".join(f"test -S {shlex.quote(p)}" for p in paths)
            remote.run(f"for i in $(seq 300); do {waits} && exit 0; sleep 0.05; done; exit 1")
            forwards = [w for p in paths for w in ("-L", f"{p}:{p}")]
            proc = subprocess.Popen(["ssh", "-N", *remote.ssh_options(), "-o", "ExitOnForwardFailure=yes",
                                     "-o", "StreamLocalBindUnlink=yes", *forwards, remote.dest],
                                    stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                    start_new_session=True)
            return proc, paths

        for got in self._each_server(wait_and_forward):
            if got is None:
                continue
            proc, paths = got
            self.forwarders.append(proc)
            self.run.add_pid(proc.pid, "control socket forward (ssh)")
            deadline = time.monotonic() + 15
            while not all(Path(p).is_socket() for p in paths):
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"forwarding the switches' control sockets failed: "
                                       f"{proc.stderr.read().decode(errors='replace')[:300] if proc.poll() is not None else 'timed out'}")
                time.sleep(0.02)

    def _connect(self, s: str) -> SwitchClient:
        node = self.net.get(s)
        try:
            if self.backend == "bmv2":
                client = Bmv2Client(s, node.thrift_port, timeout=15, thrift_ip=node.thrift_ip)
            else:
                client = ForwardedClient(s, str(node.control_path), timeout=15)
        except Exception as exc:
            reason = node.died()
            raise RuntimeError(reason or f"switch {s} on {self.placement[s]} did not come up: {exc}") from exc
        if self.keep:
            client = LoggedClient(client, self.run.path / f"{s}.commands", self.t0)
        return client

    def stop(self) -> None:
        if self.watcher is not None:
            self.watcher.stop()
            self.watcher = None
        for client in self.clients.values():
            client.close()
        self.clients.clear()
        for agent in self.agents.values():
            agent.close()
        self.agents.clear()
        try:
            if self.net is not None:
                try:
                    self._stop_data_planes()
                    self.net.stop()        # the node shells (their ssh): Mininet's own stop
                finally:
                    self.net = None
        finally:
            for proc in self.forwarders:
                if proc.poll() is None:
                    proc.terminate()
                    try:
                        proc.wait(3)
                    except subprocess.TimeoutExpired:
                        proc.kill()
            self.forwarders.clear()
            if self.run is not None and self.remotes:
                if self.keep:                  # the switches' logs live on their servers
                    self._each_server(lambda r: r.get(self.run.path, "*.log *.out *.txt"))
                self._each_server(self._clean_server)
                for remote in self.remotes.values():
                    remote.close()
            run, self.run = self.run, None
            if run is not None:
                kill_pids(run.pids())                      # the head's ssh processes only
                run.remove(self.keep)

    def _stop_data_planes(self) -> None:
        """SIGTERM every switch of a server in one ssh, then wait for their ssh processes here."""
        procs = [n.proc for n in self.net.switches if getattr(n, "proc", None) is not None and n.proc.poll() is None]
        by_server: dict[str, list[int]] = {}
        for p in procs:
            if p._remote_pid is not None:
                by_server.setdefault(p.remote.server.name, []).append(p._remote_pid)
        self._each_server(lambda r: r.run(f"kill {' '.join(map(str, by_server[r.server.name]))} 2>/dev/null; true",
                                          check=False), list(by_server))
        deadline = time.monotonic() + 3
        for p in procs:
            try:
                p.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.proc.kill()            # the ssh; _clean_server kills the switch itself
                p.proc.wait()

    def _clean_server(self, remote: Remote) -> None:
        """Every process the run started on the server (its *.pid files), the run's interfaces
        (its group; host ends die with the hosts' namespaces) and its directory there."""
        run = shlex.quote(str(self.run.path))
        remote.run(f"for f in $(find {run} -name '*.pid' 2>/dev/null); do kill -9 $(cat $f) 2>/dev/null; done; "
                   f"ip link delete group {self.group} 2>/dev/null; "
                   f"rm -rf {run}; true", check=False, timeout=60)

    # -- workers --------------------------------------------------------------------
    def host(self, name: str):
        return _HostView(self.net.get(name))

    def start_worker(self, h: str, argv: list[str], log, cwd: str, env: dict[str, str], gate=None,
                     preexec_fn=None):
        """Worker `argv` in host h's namespace on its server (see RemoteAggHost.worker_command);
        the run directory's files (the plan) are copied there first."""
        node = self.net.get(h)
        remote = self.remotes[self.placement[h]]
        out_dir = Path(log.name).parent
        key = (remote.server.name, str(out_dir))
        if key not in self._pushed:           # the plan, and any run file the command names
            named = [Path(a) for a in argv if a.startswith(str(self.run.path)) and Path(a).is_file()]
            remote.run(f"mkdir -p {shlex.quote(str(out_dir))}")
            remote.put([p for p in out_dir.iterdir() if p.is_file() and p.suffix == ".json"] + named)
            self.agents[remote.server.name].watch(out_dir)
            self._pushed.add(key)
        keep = {**agglab_env(env), **{k: env[k] for k in ("PYTHONPATH",) if k in env}}
        keep.pop(END_ENV, None)       # the end gate's pipes do not cross ssh: the worker passes through
        if gate is not None:
            keep["AGGLAB_START_FDS"] = "3,4"
        command = node.worker_command(argv, keep, cwd, log.name, gate is not None)
        stdin, stdout = (gate.fds[1], gate.fds[0]) if gate is not None else (subprocess.DEVNULL, subprocess.DEVNULL)
        pidfile = str(Path(log.name).with_suffix(".pid"))
        return start_remote(remote, command, pidfile, f"worker on {h}", out=stdout, stdin=stdin,
                            preexec_fn=preexec_fn)

    def worker_outputs(self, out_dir: Path) -> None:
        """The workers' reports, results, logs and progress from every server, here."""
        self._each_server(lambda r: r.get(out_dir, "*.json *.npy *.log *.progress *.prof"),
                          {self.placement[h] for h in hosts(self.graph)})

    def fidelity_probe(self):
        """Every server's samples merged on the head (emulation/cluster/fidelity.py)."""
        return ClusterProbe(self.graph, self.placement, self.agents, self.run.path, self.tunnels).start()

    # -- links and switches -----------------------------------------------------------
    def watch_links(self, on_change):
        """`on_change(u, v, up, t, intf)` for every change of a link end in a server's root
        namespace (switch ports, tunnel ends), as netlink reports it there and the server's
        agent forwards it, and at once for the links the head changes itself (set_link); one
        at a time and in order on one thread, as LinkMonitor calls it. A link's other end, or
        the forward of a change the head already told, is the same link again: the jobs
        ignore a link marked as it already is (controller/topology.mark_link)."""
        edge_of = {name: (u, v) for u, v, e in self.graph.edges(data=True) for name in e["intfs"].values()}
        events = self._link_events = _LinkEvents(on_change)
        root_ends: dict[str, list[str]] = {name: [] for name in self.agents}
        for u, v, e in self.graph.edges(data=True):
            for n in (u, v):
                if self.graph.nodes[n]["kind"] == "switch":
                    root_ends[self.placement[n]].append(e["intfs"][n])

        def forwarded(intf: str, up: bool, t: float) -> None:
            if intf in edge_of:
                events.put((*edge_of[intf], up, t, intf))

        for name, agent in self.agents.items():
            if not agent.watch_links(sorted(root_ends[name]), forwarded):
                events.stop()
                raise RuntimeError(f"the agent on {name} did not start watching its links")
        return events

    def set_link(self, a: str, b: str, up: bool) -> float:
        changed = super().set_link(a, b, up)          # on BMv2 with the sources stopped: _sources_quiet
        events = getattr(self, "_link_events", None)
        if events is not None:
            events.put((a, b, up, time.monotonic(), self.graph.edges[a, b]["intfs"][a]))
        return changed

    def _sources_quiet(self):
        """Every server's sources stopped and switch ports idle, through its agent (bmv2.py)."""
        return bmv2.sources_quiet(self)

    def _receive_asleep(self, switch: str) -> None:
        """Not here: the switch's threads are on its server (the pid here is ssh's), and its
        agent's idle wait (bmv2.sources_quiet) is the counters' only."""

    def kill_switch(self, name: str, wait: float | None = None) -> float:
        proc = self._switch_proc(name)
        if proc.poll() is not None or name in self.dead or name in self._handled:
            raise ValueError(f"switch {name} is not running")
        pid = proc.remote_pid                     # known since it started (read_pids)
        agent = self.agents.get(self.placement[name])
        done = self._handled[name] = threading.Event()
        t = time.monotonic()
        if agent is not None and agent.proc.poll() is None:
            agent.tell(f"signal {int(signal.SIGKILL)} {pid}")   # a line on an open connection (agent.py)
        else:
            proc.kill()
        if wait and self.watcher is not None and not done.wait(wait):
            raise RuntimeError(f"switch {name} was killed but its exit was not handled within {wait} s")
        return t

    def _ports(self, name: str, up: bool) -> None:
        node = self.net.get(name)
        names = [i.name for i in node.intfList() if i.name != "lo"]
        if not up:
            self._downed[name] = names
        else:
            names = self._downed.pop(name, [])
        if names:
            node.remote.run("ip -batch -", input="".join(f"link set dev {n} {'up' if up else 'down'}\n"
                                                         for n in names), check=False)

    def servers_of(self) -> dict:
        """What the result says about the placement: each node's server, the tunnels."""
        return {"servers": {s.name: s.address for s in self.cluster.servers},
                "placement": dict(sorted(self.placement.items())),
                "tunnels": [f"{u}-{v}" for u, v in self.tunnels]}


class _LinkEvents:
    """The job's link callback on one thread, fed in order (LinkMonitor's contract), from
    the head's set_link and the agents' forwards."""

    def __init__(self, on_change):
        self.queue: "queue.Queue" = queue.Queue()
        self.on_change = on_change
        self.thread = threading.Thread(target=self._run, daemon=True, name="cluster-link-events")
        self.thread.start()

    def put(self, event: tuple) -> None:
        self.queue.put(event)

    def _run(self) -> None:
        while (event := self.queue.get()) is not None:
            try:
                self.on_change(*event)
            except Exception:  # noqa: BLE001 - as LinkMonitor: the next change must still arrive

                traceback.print_exc()

    def stop(self) -> None:
        self.queue.put(None)
        self.thread.join(5)
