"""`agglab export p4app`: agglab's pipeline as a p4-utils network (p4app.json + CLI files).

Why: p4-utils users start networks with `sudo p4run --config p4app.json`. The export gives them
agglab's topology (same switch and host names, same port numbers, same addresses) running
p4src/agglab.p4, with each switch's table entries, multicast groups and aggregation trees
written as simple_switch_CLI files (p4-utils' `cli_input`). The entries come from agglab's own
controller code (forwarding and tree installation) run against a recording client, so they are
the entries a `--backend bmv2` run installs at start, epoch 0.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

from agglab.controller import forward
from agglab.controller.addressing import assign_addresses
from agglab.controller.schemes import carry_for
from agglab.controller.tree_job import TreeJob
from agglab.controller.switch_client import SwitchClient
from agglab.controller.topologies import for_run
from agglab.controller.topology import hosts, switches, workers as worker_hosts
from agglab.emulation.p4build import p4c_options
from agglab.ground import addresses, wire
from agglab.ground.paths import P4SRC
from agglab.ground.runspec import RunSpec
from agglab.softswitch.schemes import write_p4

THRIFT_BASE = 9090


class RecordingClient(SwitchClient):
    """Keeps the command lines instead of sending them; answers as BMv2 would (handles count
    per table and per multicast node, from 0). Resets stay whole `register_reset` lines (what
    simple_switch_CLI takes; on a switch just started they cost nothing)."""

    cheap_register_reset = True

    def __init__(self, name: str):
        self.name = name
        self.lines: list[str] = []
        self._handles: dict[str, int] = {}

    def command(self, line: str) -> str:
        self.lines.append(line)
        words = line.split()
        if words[0] in ("table_add", "mc_node_create"):
            key = words[1] if words[0] == "table_add" else "mc"
            handle = self._handles.get(key, 0)
            self._handles[key] = handle + 1
            return f"added with handle {handle}"
        if words[0] == "register_read":
            return f"{words[1]}= 0"
        return ""


def _host_end(g, h: str, sw: str) -> dict:
    ip, mac = g.edges[h, sw]["addrs"][h]
    return {"addr": mac, "params": {"ip": f"{ip}/{addresses.PREFIX_LEN}"}}


def p4app(spec: RunSpec, out_dir: Path) -> dict:
    """Write p4app.json, <switch>-commands.txt and epoch.json into out_dir; return the config."""
    g = assign_addresses(for_run(spec))
    out_dir.mkdir(parents=True, exist_ok=True)
    clients = {sw: RecordingClient(sw) for sw in switches(g)}
    for sw in switches(g):
        forward.install_forwarding(clients[sw], g, sw)
    TreeJob(g, clients, spec.tree, worker_hosts(g), spec.default_window(), out_dir / "epoch.json",
            carry_for=carry_for, algorithm=spec.algorithm, job=spec.job,
            standby=False).start()        # recorded, never rerouted: no standby trees
    links = []
    for u, v, e in sorted(g.edges(data=True), key=lambda t: (t[0], t[1])):
        params = {"port1": e["ports"][u], "port2": e["ports"][v],
                  "intfName1": e["intfs"][u], "intfName2": e["intfs"][v]}
        for end, node, other in (("1", u, v), ("2", v, u)):
            if g.nodes[node]["kind"] == "host":
                host = _host_end(g, node, other)
                params[f"addr{end}"], params[f"params{end}"] = host["addr"], host["params"]
        if e.get("bw"):
            params["bw"] = e["bw"]
        links.append([u, v, params])
    switch_conf = {}
    for i, sw in enumerate(switches(g)):
        cli = out_dir / f"{sw}-commands.txt"
        cli.write_text("".join(line + "\n" for line in clients[sw].lines if not line.startswith("register_reset")))
        switch_conf[sw] = {"cli_input": str(cli.resolve()), "thrift_port": THRIFT_BASE + i}
    write_p4()                          # p4run compiles p4_src itself: the schemes' lines first
    conf = {
        "p4_src": str(P4SRC / "agglab.p4"),
        "cli": True,
        "pcap_dump": False,
        "enable_log": False,
        "topology": {
            "default": {"auto_arp_tables": True, "auto_gw_arp": False},
            "links": links,
            "hosts": {h: {"ip": f"{g.nodes[h]['ip']}/{addresses.PREFIX_LEN}", "mac": g.nodes[h]["mac"]}
                      for h in hosts(g)},
            "switches": switch_conf,
        },
    }
    if wire.WIDE:
        # p4run compiles p4_src itself: the wide variant needs its define (p4-utils' P4C takes `opts`)
        conf["compiler_module"] = {"options": {"opts": " ".join(p4c_options())}}
    (out_dir / "p4app.json").write_text(json.dumps(conf, indent=2) + "\n")
    return conf


def main(args) -> int:
    """CLI entry: agglab export p4app TOPOLOGY [--k K] [--workers N] [--tree T] [--out DIR]."""
    try:
        spec = RunSpec(topology=args.topology, k=args.k, workers=args.workers, tree=args.tree,
                       backend="bmv2", bw=args.bw)
        spec.validate()
        conf = p4app(spec, Path(args.out))
    except ValueError as exc:
        print(f"agglab export p4app: {str(exc).splitlines()[0]}", file=sys.stderr)
        return 2
    except OSError as exc:                  # --out names no directory we may write
        print(f"agglab export p4app: --out {args.out}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    topo = conf["topology"]
    entries = sum(len(re.findall(r"^table_add", Path(s["cli_input"]).read_text(), re.M))
                  for s in topo["switches"].values())
    print(f"wrote {Path(args.out) / 'p4app.json'}: {len(topo['switches'])} switches, {len(topo['hosts'])} hosts, "
          f"{len(topo['links'])} links, {entries} table entries (epoch 0, {spec.tree} trees)")
    print(f"start it with: sudo p4run --config {Path(args.out) / 'p4app.json'}")
    return 0
