"""`agglab export p4app`: a p4-utils network description of a fat-tree that p4run can read."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter

from agglab.cli import main
from agglab.ground import wire
from agglab.ground.paths import REPO


def test_fat_tree_export_is_a_p4utils_network(tmp_path, capsys):
    out = tmp_path / "net"
    assert main(["export", "p4app", "fattree", "--k", "4", "--workers", "8", "--out", str(out)]) == 0
    conf = json.loads((out / "p4app.json").read_text())
    topo = conf["topology"]
    assert conf["p4_src"].endswith("p4src/agglab.p4")
    # k=4 fat-tree: 4 core + 8 aggregation + 8 edge switches, 16 hosts, 16+16+16 links
    assert len(topo["switches"]) == 20 and len(topo["hosts"]) == 16 and len(topo["links"]) == 48
    names = set(topo["switches"]) | set(topo["hosts"])
    assert all(u in names and v in names for u, v, _ in topo["links"])
    # every switch has 4 ports, numbered 1..4, each used once; every host one link
    ports = Counter()
    per_switch: dict[str, set] = {}
    for u, v, p in topo["links"]:
        for node, number in ((u, p["port1"]), (v, p["port2"])):
            ports[node] += 1
            if node in topo["switches"]:
                per_switch.setdefault(node, set()).add(number)
    assert all(per_switch[s] == {1, 2, 3, 4} for s in topo["switches"])
    assert all(ports[h] == 1 for h in topo["hosts"])
    # hosts: distinct addresses, matching the address on their link end
    ips = [h["ip"] for h in topo["hosts"].values()]
    assert len(set(ips)) == 16
    for u, v, p in topo["links"]:
        if u in topo["hosts"]:
            assert p["params1"]["ip"] == topo["hosts"][u]["ip"] and p["addr1"] == topo["hosts"][u]["mac"]
        if v in topo["hosts"]:
            assert p["params2"]["ip"] == topo["hosts"][v]["ip"] and p["addr2"] == topo["hosts"][v]["mac"]
    # distinct Thrift ports; each switch's CLI file forwards to all 16 hosts, and the trees are in
    assert len({s["thrift_port"] for s in topo["switches"].values()}) == 20
    trees = 0
    for name, s in topo["switches"].items():
        lines = open(s["cli_input"]).read().splitlines()
        assert sum(line.startswith("table_add ipv4_lpm ipv4_forward") for line in lines) == 16, name
        trees += any(line.startswith("table_add agg_job") for line in lines)
        assert all(line.split()[0] in {"table_add", "mc_mgrp_create", "mc_node_create", "mc_node_associate",
                                       "table_set_default", "register_write"} for line in lines), name
    assert trees >= 3          # 8 workers on 4 edge switches: at least the edges and a root aggregate
    assert "20 switches, 16 hosts, 48 links" in capsys.readouterr().out
    assert ("compiler_module" in conf) is wire.WIDE   # p4-utils' default p4c options build the 64-value program


def test_the_wide_variant_tells_p4run_its_define(tmp_path):
    out = tmp_path / "wide"
    res = subprocess.run([sys.executable, "-m", "agglab", "export", "p4app", "single", "--workers", "2",
                          "--out", str(out)], cwd=REPO, env={**os.environ, "AGGLAB_K": "256"},
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    opts = json.loads((out / "p4app.json").read_text())["compiler_module"]["options"]["opts"].split()
    assert "-DAGG_K=256" in opts and opts[:4] == ["--target", "bmv2", "--arch", "v1model"]


def test_bad_topology_is_one_line_and_exit_2(tmp_path, capsys):
    assert main(["export", "p4app", "nosuch", "--out", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("agglab export p4app:") and err.count("\n") == 1
