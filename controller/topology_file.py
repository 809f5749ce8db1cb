"""Topologies from YAML files, with errors that name the line and what is wrong.

Format (see experiments/topologies/example.yaml):

    name: two-racks                 # optional
    nodes:
      switches: [sp1, {name: t1, tier: leaf}]
      hosts:
        - h1                        # a bare name, or
        - {name: h2, rank: 1, rack: t1}
    links:
      - [h1, t1, 100]               # [a, b] or [a, b, bw in Mb/s]; bw null = unshaped
      - [t1, sp1, 40]

Ranks are optional: when no host has one, every host is a worker in natural name order;
otherwise exactly the ranked hosts are workers and their ranks must be 0..W-1 (the worker
index the switches and agents use). Hosts only link to switches: agglab never forwards
aggregation traffic through a host.

Why walk yaml's node tree instead of yaml.safe_load: the composed nodes keep their start
marks, so a wrong entry is reported at its own line, which is what a user editing a
50-link file needs.
"""

from __future__ import annotations

import re
from pathlib import Path

import networkx as nx
import yaml

from agglab.controller.topology import IFNAME_MAX, TopologyError, assign_ports, natural_key

NAME_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")
_construct = yaml.constructor.SafeConstructor()


class _Reader:
    def __init__(self, path: str):
        self.path = path

    def fail(self, node, message: str):
        line = node.start_mark.line + 1 if node is not None else 1
        raise TopologyError(message, line=line, path=self.path)

    def scalar(self, node, what: str):
        if not isinstance(node, yaml.ScalarNode):
            self.fail(node, f"{what} must be a single value, not a {_kind(node)}")
        return _construct.construct_object(node)

    def mapping(self, node, what: str, allowed: set[str]) -> dict:
        if not isinstance(node, yaml.MappingNode):
            self.fail(node, f"{what} must be a mapping, not a {_kind(node)}")
        out = {}
        for key_node, value in node.value:
            key = self.scalar(key_node, "a key")
            if key not in allowed:
                self.fail(key_node, f"unknown key {key!r} in {what} (allowed: {', '.join(sorted(allowed))})")
            if key in out:
                self.fail(key_node, f"duplicate key {key!r} in {what}")
            out[key] = value
        return out

    def sequence(self, node, what: str) -> list:
        if node is None or (isinstance(node, yaml.ScalarNode) and node.tag.endswith(":null")):
            return []
        if not isinstance(node, yaml.SequenceNode):
            self.fail(node, f"{what} must be a list, not a {_kind(node)}")
        return node.value

    def name(self, node, what: str) -> str:
        value = self.scalar(node, what)
        if not isinstance(value, str) or not NAME_RE.match(value):
            self.fail(node, f"{what} {value!r} must start with a letter and contain only letters, "
                            "digits and _")
        if len(value) > IFNAME_MAX - len("-eth9"):
            self.fail(node, f"{what} {value!r} is too long: Mininet interface names "
                            f"'<node>-eth<N>' must fit in {IFNAME_MAX} characters")
        return value


def _kind(node) -> str:
    return {yaml.MappingNode: "mapping", yaml.SequenceNode: "list"}.get(type(node), "value")


def load(path: str | Path) -> nx.Graph:
    """Parse and validate a topology file into the shared graph (ports assigned)."""
    path = str(path)
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise TopologyError(f"cannot read topology file: {exc.strerror}", path=path) from exc
    try:
        root = yaml.compose(text)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        raise TopologyError(f"YAML syntax: {exc.problem or exc.context}",
                            line=mark.line + 1 if mark else None, path=path) from exc
    r = _Reader(path)
    if root is None:
        raise TopologyError("the file is empty; expected 'nodes' and 'links'", line=1, path=path)
    top = r.mapping(root, "the topology", {"name", "nodes", "links"})
    for key in ("nodes", "links"):
        if key not in top:
            r.fail(root, f"missing '{key}' section")
    g = nx.Graph(name=str(r.scalar(top["name"], "name")) if "name" in top else Path(path).stem,
                 topology="file", path=path)
    lines: dict[str, yaml.Node] = {}
    nodes = r.mapping(top["nodes"], "'nodes'", {"hosts", "switches"})
    _read_switches(r, g, nodes.get("switches"), lines)
    ranked = _read_hosts(r, g, nodes.get("hosts"), lines)
    _read_links(r, g, top["links"], lines)
    _check(r, g, ranked, lines, top)
    g.graph["ranks_given"] = bool(ranked)     # else every host was ranked in name order
    return assign_ports(g)


def _read_switches(r: _Reader, g: nx.Graph, node, lines: dict) -> None:
    for item in r.sequence(node, "'switches'"):
        attrs = {"kind": "switch"}
        if isinstance(item, yaml.MappingNode):
            entry = r.mapping(item, "a switch", {"name", "tier"})
            if "name" not in entry:
                r.fail(item, "a switch needs a 'name'")
            name = r.name(entry["name"], "switch name")
            if "tier" in entry:
                attrs["tier"] = str(r.scalar(entry["tier"], "tier"))
        else:
            name = r.name(item, "switch name")
        if name in g:
            r.fail(item, f"node {name!r} is defined twice (first on line {lines[name].start_mark.line + 1})")
        g.add_node(name, **attrs)
        lines[name] = item


def _read_hosts(r: _Reader, g: nx.Graph, node, lines: dict) -> dict[int, str]:
    ranked: dict[int, str] = {}
    for item in r.sequence(node, "'hosts'"):
        attrs = {"kind": "host"}
        if isinstance(item, yaml.MappingNode):
            entry = r.mapping(item, "a host", {"name", "rank", "rack"})
            if "name" not in entry:
                r.fail(item, "a host needs a 'name'")
            name = r.name(entry["name"], "host name")
            if "rank" in entry:
                rank = r.scalar(entry["rank"], "rank")
                if isinstance(rank, bool) or not isinstance(rank, int) or rank < 0:
                    r.fail(entry["rank"], f"rank of {name} must be an integer >= 0, got {rank!r}")
                if rank in ranked:
                    r.fail(entry["rank"], f"rank {rank} is given to both {ranked[rank]} and {name}")
                ranked[rank] = name
                attrs["rank"] = rank
            if "rack" in entry:
                attrs["rack"] = r.name(entry["rack"], "rack")
                lines[f"rack:{name}"] = entry["rack"]
        else:
            name = r.name(item, "host name")
        if name in g:
            r.fail(item, f"node {name!r} is defined twice (first on line {lines[name].start_mark.line + 1})")
        g.add_node(name, **attrs)
        lines[name] = item
    return ranked


def _read_links(r: _Reader, g: nx.Graph, node, lines: dict) -> None:
    for item in r.sequence(node, "'links'"):
        parts = r.sequence(item, "a link")
        if len(parts) not in (2, 3):
            r.fail(item, f"a link is [a, b] or [a, b, bw], got {len(parts)} items")
        a, b = (r.scalar(p, "a link end") for p in parts[:2])
        for end, p in ((a, parts[0]), (b, parts[1])):
            if end not in g:
                r.fail(p, f"link end {end!r} is not a defined host or switch")
        if a == b:
            r.fail(item, f"link from {a} to itself")
        if g.has_edge(a, b):
            r.fail(item, f"duplicate link {a}-{b} (first on line {g.edges[a, b]['line']})")
        if g.nodes[a]["kind"] == g.nodes[b]["kind"] == "host":
            r.fail(item, f"link {a}-{b} joins two hosts; hosts may only link to switches")
        bw = r.scalar(parts[2], "bw") if len(parts) == 3 else None
        if bw is not None and (isinstance(bw, bool) or not isinstance(bw, (int, float)) or bw <= 0):
            r.fail(parts[2], f"bw of link {a}-{b} must be a positive number of Mb/s or null, got {bw!r}")
        g.add_edge(a, b, bw=bw, line=item.start_mark.line + 1)


def _check(r: _Reader, g: nx.Graph, ranked: dict[int, str], lines: dict, top: dict) -> None:
    hosts = sorted((n for n, d in g.nodes(data=True) if d["kind"] == "host"), key=natural_key)
    if not hosts:
        r.fail(top["nodes"], "no hosts defined")
    for h in hosts:
        if g.degree(h) == 0:
            r.fail(lines[h], f"host {h} has no link")
        rack = g.nodes[h].get("rack")
        if rack is not None and (rack not in g or g.nodes[rack]["kind"] != "switch"
                                 or not g.has_edge(h, rack)):
            r.fail(lines[f"rack:{h}"], f"rack of {h} must be a switch it links to, got {rack!r}")
    for name in g:
        need = len(f"{name}-eth{g.degree(name)}")
        if need > IFNAME_MAX:
            r.fail(lines[name], f"{name} has {g.degree(name)} links, so its interface names exceed "
                                f"{IFNAME_MAX} characters; shorten the name")
    if ranked:
        for rank in sorted(ranked):
            if rank >= len(ranked):
                missing = min(set(range(len(ranked))) - set(ranked))
                r.fail(lines[ranked[rank]], f"ranks must be 0..{len(ranked) - 1}; rank {missing} is "
                                            f"missing but {ranked[rank]} has rank {rank}")
    else:
        for rank, h in enumerate(hosts):
            g.nodes[h]["rank"] = rank
