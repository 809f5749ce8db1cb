"""Build a Mininet network from the shared topology graph and hand out switch clients.

Why our own builder instead of `mn --topo`: port numbers, interface names and
addresses must come from the graph (controller/topology.py) so that the code that
programs tables uses exactly the ports Mininet created. Every process and interface
is recorded in a RunRecord so `agglab clean` can undo a crashed run. The whole network lives
in a network namespace of the run's own (ground/netns.py), which the building thread enters
before the first node: any number of runs coexist with the same node names.

This module is the network's build, teardown and use (links, workers, clients). Beside it:
what each host's set-up script says (emulation/host_setup.py), the fork server of the
allreduce workers (emulation/worker_launcher.py) and the switches' deaths, hangs and restarts
(emulation/switch_failures.py, a mixin of EmulatedNetwork).
"""

from __future__ import annotations

import contextlib
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path

import networkx as nx

from agglab.emulation import bmv2_ports
from agglab.emulation.command_log import LoggedClient
from agglab.emulation.fidelity import FidelityProbe
from agglab.emulation.p4build import compile_p4
from agglab.ground.phases import Phases
from agglab.ground import links, netlease
from agglab.ground import netns
from agglab.ground.netns import RunNamespace
from agglab.ground import rundir
from agglab.ground.cleanup import clean
from agglab.ground.rundir import RunRecord
from agglab.controller import addressing
from agglab.ground import addresses, host_tcp
from agglab.controller.bmv2_client import Bmv2Client
from agglab.controller.switch_client import SoftSwitchClient, SwitchClient
from agglab.controller.topology import hosts, port, switches
from agglab.emulation.host_setup import SETUP_OK, host_setup
from agglab.emulation.link_monitor import LinkMonitor
from agglab.emulation.switch_failures import SwitchFailures
from agglab.emulation.worker_launcher import FORKED_WORKERS, start_worker_launcher
from agglab.ground.rundir import delete_interfaces, kill_pids

BACKENDS = ("soft", "bmv2")
THRIFT_BASE = 9090


class EmulatedNetwork(SwitchFailures):
    """A running Mininet network built from `graph`; use as a context manager."""

    def __init__(self, graph: nx.Graph, backend: str = "soft", seed: int = 0, pcap: bool = False,
                 keep: str | Path | None = None, t0: float | None = None, tcp_cc: str = host_tcp.DEFAULT_CC):
        if backend not in BACKENDS:
            raise ValueError(f"unknown backend {backend!r}; choose one of {BACKENDS}")
        self.graph = addressing.assign_addresses(graph)
        self.backend = backend
        self.seed = seed
        self.pcap = pcap
        self.keep = Path(keep) if keep else None    # copy the run directory here on stop
        self.tcp_cc = host_tcp.check_cc(tcp_cc)     # the hosts' congestion control (ground/host_tcp.py)
        self.host_tcp: dict = {}                    # the TCP settings read in the hosts' namespaces
        self.t0 = time.monotonic() if t0 is None else t0   # the command log's clock (the session's events')
        self.net = None
        self.launcher = None                     # forks the software switches (softswitch/launcher.py)
        self.worker_launcher = None              # forks the allreduce workers (start_worker_launcher)
        self.phases = Phases()                   # start()'s steps -> seconds (bench.py prints them)
        self.run: RunRecord | None = None
        self.clients: dict[str, SwitchClient] = {}
        self.watcher = None                      # emulation/switch_watch.py, once watch_switches()
        self.probe = None                        # emulation/switch_probe.py: pings, once watch_switches()
        self.hung: dict[str, dict] = {}          # switch -> {"t_detect", "t_last_answer"} of its hang
        self.hang_log: list[dict] = []           # every hang seen: {"switch", "t_detect", "t_last_answer"}
        self.late: list[dict] = []               # declared hung, then answered (switch_failures: "Late is not hung")
        self.dead: dict[str, str] = {}           # switch -> why its process is gone (exit code, log tail)
        self.incarnation: dict[str, int] = {}    # switch -> restarts so far (counters start again at 0)
        self._downed: dict[str, list[str]] = {}  # dead switch -> its ports taken down with it
        self._handled: dict[str, threading.Event] = {}   # switch -> set once its death was handled
        self._leased = False                     # holds the machine's CPU lease (ground/netlease.py)
        self.netns: RunNamespace | None = None   # the run's network namespace (ground/netns.py)

    # -- lifecycle ----------------------------------------------------------------
    def start(self) -> "EmulatedNetwork":
        from mininet.link import TCLink  # lazy: Mininet, only start() needs it
        from mininet.log import setLogLevel  # lazy: Mininet, only start() needs it
        from mininet.net import Mininet  # lazy: Mininet, only start() needs it

        setLogLevel("error")
        try:                                     # a signal at any moment still cleans up
            with self.phases.timed("launcher"):
                self.run = RunRecord.create("net")
                netlease.acquire(self.run.path)  # the CPU is shared: ground/netlease.py says why
                self._leased = True
            with self.phases.timed("old runs cleaned"):
                clean(verbose=False)             # what dead runs left
            with self.phases.timed("namespace"):  # everything of the run lives in it (ground/netns.py)
                self.netns = RunNamespace()
                self.run.set_netns(self.netns.name)
                self.netns.create().enter()
            with self.phases.timed("launcher"):
                if self.backend == "soft":
                    from agglab.emulation.switch_nodes import start_launcher  # lazy: loads Mininet, only start() needs it

                    self.launcher = start_launcher(self.run)
                self.worker_launcher = start_worker_launcher(self.run)
                self.net = Mininet(topo=None, build=False, controller=None, autoSetMacs=False,
                                   autoStaticArp=False, link=TCLink)
            self._build()
        except BaseException:
            self.stop()
            raise
        return self

    def _build(self) -> None:
        """The build steps after the run's own preparation, each a timed phase (shared with
        emulation/cluster/network.py, whose nodes, links and switches live on servers)."""
        with self.phases.timed("node shells"):
            self._add_nodes()
        with self.phases.timed("links"):
            self._add_links()
        with self.phases.timed("switches started"):
            self._start_switches()
        with self.phases.timed("hosts configured"):
            self._configure_hosts()
        with self.phases.timed("switches answering"):
            self._connect_switches()

    def _add_nodes(self) -> None:
        """Every host and switch node, their shells started all at once.

        Why at once: each Mininet node starts a bash (in a new network namespace for a host)
        and waits for its prompt; one after the other that was 2.6-3.3 s of a k=8 fat-tree's
        208 nodes on a busy machine, 0.9-1.2 s at once (then CPU-bound: more threads than 16
        do not help). Threads make them wait together; Mininet's own constructors run
        unchanged and the nodes are added to the network in graph order.
        Mininet's build() is not run: its per-host configuration (three shell commands each)
        is part of the hosts' set-up scripts (_configure_hosts)."""
        from mininet.node import Host  # lazy: Mininet, only _add_nodes() needs it

        g = self.graph
        json_path = None
        if self.backend == "bmv2":
            json_path = str(compile_p4())
        makers = {}
        for h in hosts(g):
            a = g.nodes[h]
            makers[h] = partial(Host, h, ip=f"{a['ip']}/{addresses.PREFIX_LEN}", mac=a["mac"])
        for i, s in enumerate(switches(g)):
            if self.backend == "soft":
                from agglab.emulation.switch_nodes import SoftP4Switch  # lazy: loads Mininet, only _add_nodes() needs it

                makers[s] = partial(SoftP4Switch, s, inNamespace=False, run=self.run, launcher=self.launcher,
                                    seed=self.seed + i, pcap=self.pcap,
                                    coalesce=links.switch_coalesce(e.get("bw") for _, _, e in g.edges(s, data=True)))
            else:
                from agglab.emulation.switch_nodes import Bmv2Switch  # lazy: loads Mininet, only _add_nodes() needs it

                makers[s] = partial(Bmv2Switch, s, inNamespace=False, run=self.run, json_path=json_path,
                                    thrift_port=THRIFT_BASE + i, device_id=i, pcap=self.pcap)
        self._make_all(makers)

    def _make_all(self, makers: dict) -> None:
        """makers[name]() for every name, in threads, each node added to the network (in
        makers' order) once made. A failure or a signal raises only after every node that
        was started is made, recorded and added, so that stop() ends every shell."""
        def make(name: str):
            node = makers[name]()
            self.run.add_pid(node.pid, f"{name} shell")
            return node

        pool = ThreadPoolExecutor(max_workers=min(32, len(makers)), thread_name_prefix="mininet-node")
        futures = {name: pool.submit(make, name) for name in makers}
        try:
            for future in futures.values():
                future.result()
        finally:
            pool.shutdown(wait=True, cancel_futures=True)
            for name, future in futures.items():
                if future.done() and not future.cancelled() and future.exception() is None:
                    add = self.net.addHost if self.graph.nodes[name]["kind"] == "host" else self.net.addSwitch
                    add(name, cls=lambda _name, _node=future.result(), **_params: _node)

    def _add_links(self) -> None:
        """Every veth pair in one `ip -batch` (emulation/veths.py), then Mininet adopts them."""
        from agglab.emulation.veths import PrebuiltLink, QuietIntf, create_veths, shape  # lazy: loads Mininet, only _add_links() needs it

        g, pairs = self.graph, []
        for u, v, e in g.edges(data=True):
            ends = sorted((u, v), key=lambda n: g.nodes[n]["kind"] == "host")   # root end first
            pid = self.net.get(ends[1]).pid if g.nodes[ends[1]]["kind"] == "host" else None
            pairs.append((e["intfs"][ends[0]], e["intfs"][ends[1]], pid))
        group = self.run.link_group()
        try:
            create_veths(pairs, group, offloads_off=self.backend == "soft")
        finally:       # recorded once the kernel made them, and only those in this run's group
            self.run.add_interfaces(sorted(i for e in g.edges.values() for i in e["intfs"].values()
                                           if rundir.group_of(i) == group))
        shape({e["intfs"][n]: e["bw"] for u, v, e in g.edges(data=True) if e.get("bw")
               for n in (u, v) if g.nodes[n]["kind"] == "switch"})     # host ends: in their set-up
        for u, v, e in g.edges(data=True):
            self.net.addLink(u, v, port1=e["ports"][u], port2=e["ports"][v], cls=PrebuiltLink,
                             intfName1=e["intfs"][u], intfName2=e["intfs"][v], addr1=None, addr2=None,
                             intf=QuietIntf)

    def _start_switches(self) -> None:
        """Every switch's data plane (what Mininet's start() does, without its build()):
        software switches are forked by the launcher and boot while the hosts are set up."""
        for node in self.net.switches:
            node.start([])

    def _configure_hosts(self) -> None:
        """Addresses, routes, static neighbours, no IPv6/offloads: one script per host, all
        hosts at once (the switches boot meanwhile).

        Why scripts: the same settings as one `node.cmd` each cost a shell round trip per
        neighbour entry (16 hosts x 16 entries ...), which made this the slowest phase of a
        k=8 fat-tree (51 s of 66). Each host now runs one `sh` with one `ethtool` per NIC,
        one `ip -batch` (and one `tc -batch` when shaped), and every host shell runs its
        script concurrently (sendCmd, then waitOutput)."""
        g = self.graph
        scripts = {}
        for h in hosts(g):
            node = self.net.get(h)
            intfs = [i.name for i in node.intfList() if i.name != "lo"]
            lines, batch, shaping = host_setup(g, h, intfs, self.tcp_cc)
            batch += self._extra_host_lines(intfs)
            for nbr in g.neighbors(h):             # keep Mininet's view of the NICs true
                e = g.edges[h, nbr]
                intf = node.intf(e["intfs"][h])
                intf.mac, (intf.ip, intf.prefixLen) = e["addrs"][h][1], (e["addrs"][h][0], addresses.PREFIX_LEN)
            script = scripts[h] = self.run.path / f"{h}.setup.sh"
            tc = ["tc -batch - <<'EOF'", *shaping, "EOF"] if shaping else []
            script.write_text("\n".join(["set -e", *lines,
                                         "ip -batch - <<'EOF'", *batch, "EOF", *tc,
                                         *host_tcp.READ_LINES, f"echo {SETUP_OK}", ""]))
        self._ship_host_scripts(scripts)
        started = []
        for h, script in scripts.items():
            node = self.net.get(h)
            node.sendCmd(f"sh {script} 2>&1")
            started.append((h, node))
        outs = {h: node.waitOutput() for h, node in started}
        failed = [(h, out.strip()) for h, out in outs.items() if SETUP_OK not in out]
        if failed:
            raise RuntimeError("host set-up failed: " + "; ".join(f"{h}: {out[:300]}" for h, out in failed))
        self.host_tcp = host_tcp.summary({h: host_tcp.parse(out) for h, out in outs.items()})

    def _extra_host_lines(self, intfs: list[str]) -> list[str]:
        """More `ip -batch` lines for a host's NICs (a cluster's MTU that fits its tunnels)."""
        return []

    def _ship_host_scripts(self, scripts: dict) -> None:
        """Put the hosts' set-up scripts where their shells run (here: they already are)."""

    def _connect_switches(self) -> None:
        for s in switches(self.graph):
            self.clients[s] = self._connect(s)

    def _connect(self, s: str) -> SwitchClient:
        node = self.net.get(s)
        try:
            if self.backend == "soft":
                client = SoftSwitchClient(s, str(node.control_path), timeout=15)
            else:
                client = Bmv2Client(s, node.thrift_port, timeout=15, pid=getattr(node.proc, "pid", None))
        except Exception as exc:
            time.sleep(0.2)
            reason = node.died()
            raise RuntimeError(reason or f"switch {s} did not come up: {exc}") from exc
        if self.keep:                 # kept runs record every control call (SWITCH.commands)

            client = LoggedClient(client, self.run.path / f"{s}.commands", self.t0)
        return client

    def stop(self) -> None:
        try:
            self._stop_processes()
        finally:                                 # whatever failed above, the namespace and lease go
            self._release()

    def _stop_processes(self) -> None:
        """The probe, the watcher, the clients, the data planes, Mininet and the launchers."""
        if self.probe is not None:               # teardown stops switches on purpose
            self.probe.stop()
            self.probe = None
        if self.watcher is not None:
            self.watcher.stop()
            self.watcher = None
        for client in self.clients.values():
            client.close()
        self.clients.clear()
        if self.net is not None:
            try:
                self._stop_data_planes()
                if self.run is not None:
                    from agglab.emulation.veths import delete_veths  # lazy: loads Mininet, only stop() needs it

                    delete_veths(self.run.recorded_link_group() or 0, self.run.interfaces())
                self.net.stop()
            finally:
                self.net = None
        for launcher in (self.launcher, self.worker_launcher):
            if launcher is not None:
                launcher.close()
        self.launcher = self.worker_launcher = None

    def _release(self) -> None:
        """What the run recorded, its namespace, its directory and the machine's lease."""
        try:
            if self.run is not None:
                kill_pids(self.run.pids())
                delete_interfaces(self.run.interfaces(), group=self.run.recorded_link_group() or -1)
            if self.netns is not None:           # back to where start() began, then the namespace goes
                self.netns.leave()
                kill_pids(netns.pids_in(self.netns.name))
                self.netns.delete()
                self.netns = None
        finally:
            try:
                run, self.run = self.run, None
                if run is not None:
                    run.remove(self.keep)
            finally:
                if self._leased:
                    self._leased = False
                    netlease.release()

    def _stop_data_planes(self) -> None:
        """SIGTERM every switch process at once, then wait for each (Mininet's stop() would
        terminate and wait for them one after the other, up to 3 s each)."""
        procs = [p for p in (getattr(s, "proc", None) for s in self.net.switches)
                 if p is not None and p.poll() is None]
        for p in procs:
            p.terminate()
        deadline = time.monotonic() + 3
        for p in procs:
            try:
                p.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()

    def __enter__(self) -> "EmulatedNetwork":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def set_link(self, a: str, b: str, up: bool) -> float:
        """Take link a-b down (both ends) or bring it back, as Mininet's `link a b down|up`;
        returns the monotonic time the link changed state.

        On BMv2 a switch's end first leaves the switch (port_remove) and comes back after
        (port_add), with the traffic sources paused while it does: see emulation/bmv2_ports.py
        for the two BMv2 behaviours that make this necessary. The controller still learns of
        the failure from netlink."""
        ends = [(n, self.graph.edges[a, b]["intfs"][n], port(self.graph, n, other))
                for n, other in ((a, b), (b, a))
                if self.backend == "bmv2" and self.graph.nodes[n]["kind"] == "switch"]
        if not ends:
            changed = time.monotonic()
            self.net.configLinkStatus(a, b, "up" if up else "down")
            return changed
        with self._sources_quiet():
            if not up:
                for n, _intf, number in ends:
                    self._receive_asleep(n)
                    self.clients[n].command(f"port_remove {number}")
            changed = time.monotonic()
            self.net.configLinkStatus(a, b, "up" if up else "down")
            if up:
                for n, intf, number in ends:
                    self._receive_asleep(n)
                    self.clients[n].command(f"port_add {intf} {number}")
        return changed

    def _receive_asleep(self, switch: str) -> None:
        """Right before a port change: wait until the switch's receive thread sleeps in select()
        (emulation/bmv2_ports.py says why the idle counters alone are a guess)."""
        bmv2_ports.wait_receive_asleep(getattr(self.net.get(switch).proc, "pid", None))

    @contextlib.contextmanager
    def _sources_quiet(self):
        """The block runs with the traffic sources (the processes in the hosts' namespaces)
        stopped and the switches' ports idle (emulation/bmv2_ports.py); they go on after.
        A cluster's servers do it through their agents (emulation/cluster/bmv2.py)."""
        shells = [self.net.get(h).pid for h in hosts(self.graph)]
        ports_of = [i.name for s in switches(self.graph) for i in self.net.get(s).intfList() if i.name != "lo"]
        with bmv2_ports.sources_paused(bmv2_ports.processes_in_netns(shells)):
            bmv2_ports.wait_idle(ports_of)
            yield

    # -- workers ------------------------------------------------------------------
    def start_worker(self, h: str, argv: list[str], log, cwd: str, env: dict[str, str], gate=None,
                     preexec_fn=None):
        """Start worker `argv` on host h (output to the open file `log`; with a start `gate`
        it inherits the gate's pipes). A cluster's network starts it on h's server.
        `python -m agglab.hosts.worker ...` is forked by the worker launcher into h's namespace (it
        dies with the launcher, which dies with this process), other programs are started."""
        if argv[1] == "-m" and argv[2] in FORKED_WORKERS and self.worker_launcher is not None:
            return self.worker_launcher.spawn(argv[2], argv[3:], log.name, name=f"worker:{Path(log.name).stem}",
                                              cwd=cwd, env=env, netns=self.net.get(h).pid,
                                              pass_fds={fd: fd for fd in gate.fds} if gate else None)
        return self.net.get(h).popen(argv, stdout=log, stderr=log, cwd=cwd, pass_fds=gate.fds if gate else (),
                                     preexec_fn=preexec_fn, env=env)

    def worker_outputs(self, out_dir: Path) -> None:
        """The workers' files are in `out_dir` once they exited (on one machine they are already)."""

    def fidelity_probe(self):
        """A started FidelityProbe over this network's links and processes (emulation/fidelity.py)."""
        return FidelityProbe(self.graph, self.run.path / "pids").start()

    # -- access -------------------------------------------------------------------
    def watch_links(self, on_change) -> LinkMonitor:
        """Call `on_change(u, v, up, t, ifname)` whenever an interface of a graph link goes
        down or comes back (netlink); the caller stops the returned monitor."""
        edge_of = {name: (u, v) for u, v, e in self.graph.edges(data=True) for name in e["intfs"].values()}

        def seen(ifname: str, up: bool, t: float) -> None:
            on_change(*edge_of[ifname], up, t, ifname)

        return LinkMonitor(set(edge_of), seen).start()

    def host(self, name: str):
        return self.net.get(name)

    def client(self, switch: str) -> SwitchClient:
        return self.clients[switch]
