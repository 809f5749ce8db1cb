"""BMv2 on the servers of a cluster: the program where simple_switch runs, and a link
failure's quiet data plane across servers.

What differs from one machine (emulation/network.py, emulation/bmv2_ports.py):
- the compiled JSON is made on the head and copied into the run directory on every server
  (a real server need not share the head's build directory); simple_switch must be installed
  at the head's path on each server, checked once before any switch starts;
- a switch's Thrift server is reached at its server's address (RemoteBmv2Switch.thrift_ip),
  like the VXLAN underlay: that network must carry TCP to the switches' Thrift ports
  (THRIFT_BASE + switch index) as it carries UDP 4789. The client has no process here to
  read, so a reroute raises no remote switch's priority (as for the software switch);
- taking a switch's port away (port_remove before a link goes down, bmv2_ports says why)
  needs the traffic sources stopped and the ports idle, and both are on the servers: each
  server's agent (agent.py) stops the processes in its hosts' namespaces, then waits until
  its switch ports stop counting, and lets them go on afterwards. Every server stops first,
  then every server waits for idle ports, because traffic crosses servers through tunnels.
"""

from __future__ import annotations

import contextlib
import shlex
import shutil

from agglab.controller.topology import hosts, switches

ANSWER = 15.0          # seconds an agent may take to stop, drain or resume its server


def ship_program(net) -> str:
    """The BMv2 JSON (compiled here if the sources changed) in the run directory on every
    server; its path there. Raises one line when a server has no simple_switch at our path."""
    from agglab.emulation.p4build import compile_p4  # lazy: loads numpy, only ship_program() needs it
    from agglab.emulation.switch_nodes import bmv2_binary  # lazy: loads Mininet, only ship_program() needs it

    binary = bmv2_binary()
    json_path = net.run.path / "agglab.json"
    shutil.copyfile(compile_p4(), json_path)

    def ship(remote) -> str | None:
        missing = remote.run(f"test -x {shlex.quote(binary)} || echo missing", check=False).stdout.strip()
        if missing:
            return remote.server.name
        remote.put([json_path])
        return None

    without = [name for name in net._each_server(ship) if name]
    if without:
        raise RuntimeError(f"--backend bmv2: no {binary} on {', '.join(without)} (BMv2 must be installed at the "
                           "same path on every server as on the head)")
    return str(json_path)


@contextlib.contextmanager
def sources_quiet(net):
    """The block runs with every server's traffic sources stopped and every server's switch
    ports idle; the sources go on whatever happens."""
    g = net.graph
    shells: dict[str, list[str]] = {name: [] for name in net.agents}
    ports: dict[str, list[str]] = {name: [] for name in net.agents}
    for h in hosts(g):
        shells[net.placement[h]].append(str(net.net.get(h).pid))      # its shell's pid on the server
    for s in switches(g):
        ports[net.placement[s]] += [i.name for i in net.net.get(s).intfList() if i.name != "lo"]

    def ask(name: str, line: str, reply: str) -> None:
        if net.agents[name].ask(line, reply, ANSWER) is None:
            raise RuntimeError(f"the agent on {name} did not answer {line.split()[0]!r} within {ANSWER:g} s")

    try:
        net._each_server(lambda r: ask(r.server.name, f"pause {','.join(shells[r.server.name]) or '-'}", "paused"),
                         list(net.agents))
        net._each_server(lambda r: ask(r.server.name, f"idle {','.join(ports[r.server.name]) or '-'}", "idle"),
                         list(net.agents))
        yield
    finally:
        net._each_server(lambda r: ask(r.server.name, "resume", "resumed"), list(net.agents))
