"""The real network of an experiment point as the emulator runs it: a link rate, or a topology file.

Why its own module: most points run on a generated topology at one scaled rate (`bw`), but an
oversubscribed fabric, a leaf-spine or slow links have links of different rates, which only a
topology file (controller/topology_file.py's format) can say; this writes that file, the same
for every rerun and series (the slow links are picked in a fixed order).
"""

from __future__ import annotations

from pathlib import Path

import networkx as nx
import yaml

from agglab.controller import topologies


def network_for(run: dict, net: dict, link_mbps: float, topo_dir: Path) -> dict:
    """RunSpec fields for the network: `bw` for a generated topology, or a topology file
    written under topo_dir when links differ (oversubscribed uplinks, slow links). On a
    fat-tree, oversubscription slows the agg-core links (topologies.fat_tree's core_bw). The
    file ranks every job's workers (`workers` x `jobs`): the jobs share the network."""
    topo = run.get("topology", "single")
    over = float(net.get("oversubscription") or 1)
    slow = float(net.get("slow_fraction") or 0)
    if topo not in ("leafspine",) and not slow and (topo != "fattree" or over == 1):
        return {"bw": link_mbps}
    workers = int(run.get("workers", 4)) * int(run.get("jobs", 1))
    if topo == "leafspine":
        racks, spines = int(net.get("racks", 4)), int(net.get("spines", 2))
        per = int(net.get("hosts_per_rack", max(2, -(-workers // racks))))
        g = topologies.leaf_spine(racks, per, spines, host_bw=link_mbps,
                                  uplink_bw=link_mbps * per / (spines * over), workers=workers)
    elif topo == "fattree":
        g = topologies.fat_tree(run.get("k") or 4, bw=link_mbps, workers=workers, core_bw=link_mbps / over)
        topo = f"fattree-k{run.get('k') or 4}"
    else:
        raise ValueError(f"slow links need topology leafspine or fattree, not {topo!r}")
    if slow:
        _slow_down(g, slow, float(net.get("slow_factor", 0.25)))
    name = f"{topo}-w{workers}-o{over:g}-s{slow:g}x{float(net.get('slow_factor', 0.25)):g}-{link_mbps:.6g}.yaml"
    path = topo_dir / name
    topo_dir.mkdir(parents=True, exist_ok=True)
    path.write_text(topology_yaml(g))
    run.pop("k", None)
    return {"topology": str(path), "bw": None}


def _slow_down(g: nx.Graph, fraction: float, factor: float) -> None:
    """Every 1/fraction-th switch-to-switch link (in a fixed order) at `factor` of its rate:
    deterministic, so a rerun and every series see the same slow links."""
    fabric = sorted(((u, v) for u, v in g.edges if g.nodes[u]["kind"] == g.nodes[v]["kind"] == "switch"),
                    key=lambda e: (topologies.natural_key(e[0]), topologies.natural_key(e[1])))
    count = max(1, round(len(fabric) * fraction))
    step = len(fabric) / count
    for i in range(count):
        u, v = fabric[int(i * step)]
        g.edges[u, v]["bw"] = g.edges[u, v]["bw"] * factor
        g.edges[u, v]["slow"] = True


def topology_yaml(g: nx.Graph) -> str:
    """A graph in controller/topology_file.py's format (switch tiers, host ranks and racks)."""
    sw = [{"name": n, **({"tier": g.nodes[n]["tier"]} if "tier" in g.nodes[n] else {})}
          for n in topologies.switches(g)]
    hs = []
    for n in topologies.hosts(g):
        a = g.nodes[n]
        hs.append({"name": n, **({"rank": a["rank"]} if "rank" in a else {}),
                   **({"rack": a["rack"]} if "rack" in a else {})})
    links = [[u, v, None if e.get("bw") is None else round(float(e["bw"]), 6)] for u, v, e in g.edges(data=True)]
    return yaml.safe_dump({"name": g.graph.get("name", "generated"), "nodes": {"switches": sw, "hosts": hs},
                           "links": links}, sort_keys=False, default_flow_style=None)
