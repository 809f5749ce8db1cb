"""Topology generators and YAML files: wiring facts, port conventions, line-numbered errors."""

from __future__ import annotations

import itertools
from pathlib import Path

import networkx as nx
import pytest
import re
import yaml
from hypothesis import given, settings, strategies as st

from agglab.cli import build_parser
from agglab.run_options import spec_from_args
from agglab.controller import topologies
from agglab.controller.topologies import bcube, build, fat_tree, from_yaml, leaf_spine
from agglab.controller.topology import TopologyError, hosts, port, single_switch, switches, workers
from agglab.ground import runspec

REPO = Path(__file__).resolve().parent.parent
EXAMPLE = REPO / "experiments" / "topologies" / "example.yaml"


def _names_fit(g):
    return all(len(i) <= 15 for e in g.edges.values() for i in e["intfs"].values())


@given(racks=st.integers(1, 6), per=st.integers(1, 5), spines=st.integers(1, 4),
       host_bw=st.sampled_from([10, 100, 1000]), up_bw=st.sampled_from([10, 40, 100]))
@settings(max_examples=30, deadline=None)
def test_leaf_spine_wiring(racks, per, spines, host_bw, up_bw):
    g = leaf_spine(racks, per, spines, host_bw, up_bw)
    assert len(hosts(g)) == racks * per and len(switches(g)) == racks + spines
    assert g.graph["oversubscription"] == pytest.approx(per * host_bw / (spines * up_bw))
    for h in hosts(g):
        (tor,) = g.neighbors(h)
        assert g.nodes[h]["rack"] == tor and g.nodes[tor]["tier"] == "leaf"
        assert g.edges[h, tor]["bw"] == host_bw
    for leaf in (s for s in switches(g) if g.nodes[s]["tier"] == "leaf"):
        spines_of = [n for n in g.neighbors(leaf) if g.nodes[n]["kind"] == "switch"]
        assert len(spines_of) == spines and all(g.nodes[s]["tier"] == "spine" for s in spines_of)
        assert all(g.edges[leaf, s]["bw"] == up_bw for s in spines_of)
    assert [g.nodes[w]["rank"] for w in workers(g)] == list(range(racks * per))
    assert _names_fit(g)


@pytest.mark.parametrize("k", [2, 4, 6, 8])
def test_fat_tree_wiring(k):
    g = fat_tree(k, bw=100)
    half = k // 2
    assert len(hosts(g)) == k ** 3 // 4
    tiers = {t: [s for s in switches(g) if g.nodes[s]["tier"] == t] for t in ("edge", "agg", "core")}
    assert [len(tiers[t]) for t in ("edge", "agg", "core")] == [k * half, k * half, half * half]
    assert g.number_of_edges() == 3 * k ** 3 // 4
    assert all(g.degree(s) == k for s in switches(g))
    for c in tiers["core"]:       # every core reaches each pod exactly once
        assert sorted(g.nodes[a]["pod"] for a in g.neighbors(c)) == list(range(k))
    for e in tiers["edge"]:
        assert {g.nodes[a]["pod"] for a in g.neighbors(e) if g.nodes[a]["kind"] == "switch"} == {g.nodes[e]["pod"]}
    assert nx.is_connected(g) and _names_fit(g)


def test_fat_tree_sixteen_names_fit():
    g = fat_tree(16)
    assert len(hosts(g)) == 1024 and _names_fit(g)


@given(k=st.sampled_from([4, 6, 8]), data=st.data())
@settings(max_examples=20, deadline=None)
def test_fat_tree_workers_spread_over_racks_then_pods(k, data):
    g0 = fat_tree(k)
    count = data.draw(st.integers(1, len(hosts(g0))))
    g = fat_tree(k, workers=count)
    ws = workers(g)
    assert len(ws) == count and [g.nodes[w]["rank"] for w in ws] == list(range(count))
    racks = [g.nodes[w]["rack"] for w in ws]
    pods = [g.nodes[w]["pod"] for w in ws]
    edges_total = k * k // 2
    assert max(racks.count(r) for r in racks) == -(-count // edges_total)
    assert max(pods.count(p) for p in pods) == -(-count // k)


@given(n=st.integers(2, 4), k=st.integers(0, 2))
@settings(max_examples=20, deadline=None)
def test_bcube_wiring_and_nic_numbering(n, k):
    g = bcube(n, k)
    levels = k + 1
    assert len(hosts(g)) == n ** levels and len(switches(g)) == levels * n ** k
    for h in hosts(g):
        assert g.degree(h) == levels
        for sw in g.neighbors(h):
            lvl = g.nodes[sw]["level"]
            assert port(g, h, sw) == lvl and g.edges[h, sw]["intfs"][h] == f"{h}-eth{lvl}"
    for sw in switches(g):
        members = [g.nodes[h]["address"] for h in g.neighbors(sw)]
        lvl = g.nodes[sw]["level"]
        assert len(members) == n and sorted(a[lvl] for a in members) == list(range(n))
        assert len({a[:lvl] + a[lvl + 1:] for a in members}) == 1    # differ only in digit lvl
    assert not any(g.nodes[a]["kind"] == g.nodes[b]["kind"] == "switch" for a, b in g.edges)
    assert _names_fit(g)


def test_build_dispatch():
    assert len(workers(build("fattree", k=4, workers=8, bw=None))) == 8
    assert len(workers(build("bcube", workers=9))) == 9
    assert len(workers(build("leafspine", workers=10))) == 10
    assert len(workers(build("single", workers=3))) == 3
    assert len(workers(build(str(EXAMPLE)))) == 6
    with pytest.raises(TopologyError, match="unknown topology"):
        build("torus")
    with pytest.raises(TopologyError, match="between 1 and 16"):
        build("fattree", k=4, workers=17)
    with pytest.raises(TopologyError, match="even"):
        fat_tree(5)


# Each built-in topology at a small size, as the CLI asks for it, and the hosts it must have,
# counted from the topology's definition: a row registered without one here fails below.
SMALL = {
    "single": (["--workers", "3"], 3),                     # a host per worker
    "leafspine": (["--workers", "9"], 12),                 # 4 racks grown to 3 hosts each
    "fattree": (["--k", "2", "--workers", "2"], 2),        # k^3/4
    "bcube": (["--k", "0", "--tree", "bml", "--workers", "3"], 3),   # n^(k+1), n = 3
}


def test_every_registered_topology_builds_its_hosts_and_the_cli_takes_exactly_those():
    assert list(SMALL) == list(topologies.TOPOLOGIES) == runspec.TOPOLOGIES
    parser = build_parser()
    for name, (argv, count) in SMALL.items():
        spec = spec_from_args(parser.parse_args(["allreduce", "--topology", name, *argv])).validate()
        g = topologies.for_run(spec)
        assert len(hosts(g)) == count and len(workers(g)) == spec.workers, name
        for alias in topologies.TOPOLOGIES[name].aliases:
            assert nx.utils.graphs_equal(build(alias, workers=spec.workers), build(name, workers=spec.workers))
    with pytest.raises(ValueError, match="^--topology must be one of .* or a .yaml file, got 'torus'") as info:
        spec_from_args(parser.parse_args(["allreduce", "--topology", "torus"])).validate()
    named = str(info.value).split("must be one of ", 1)[1].split(" or a .yaml file")[0]
    assert named.split(", ") == list(SMALL)


def test_the_topology_option_says_every_registered_topology(capsys):
    with pytest.raises(SystemExit, match="^0$"):
        build_parser().parse_args(["draw", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert all(f"{name}: " in text for name in SMALL) and "or a YAML file" in text


def test_example_yaml():
    g = from_yaml(EXAMPLE)
    assert g.edges["t2", "sp2"]["bw"] == 25 and g.nodes["h1"]["rack"] == "t1"
    assert workers(g) == [f"h{i}" for i in range(1, 7)]
    assert port(g, "t1", "h1") == 1 and _names_fit(g)


GOOD = """\
nodes:
  switches: [s1, s2]
  hosts:
    - {name: h1, rank: 0}
    - {name: h2, rank: 1}
links:
  - [h1, s1, 100]
  - [h2, s2]
  - [s1, s2, 10]
"""

BAD = [  # (replace this, with this, expected line, expected words)
    ("  - [h2, s2]\n", "  - [h2, s9]\n", 8, "'s9' is not a defined"),
    ("  - [s1, s2, 10]\n", "  - [s1, s2, -3]\n", 9, "positive number"),
    ("  - [s1, s2, 10]\n", "  - [s1, s2, fast]\n", 9, "positive number"),
    ("  - [s1, s2, 10]\n", "  - [s1, s2, 10, 4]\n", 9, "[a, b] or [a, b, bw]"),
    ("  - [s1, s2, 10]\n", "  - [s1, s2, 10]\n  - [s2, s1]\n", 10, "duplicate link"),
    ("  - [s1, s2, 10]\n", "  - [h1, h2]\n", 9, "joins two hosts"),
    ("  - [s1, s2, 10]\n", "  - [s1, s1]\n", 9, "to itself"),
    ("{name: h2, rank: 1}", "{name: h2, rank: 0}", 5, "rank 0 is given to both"),
    ("{name: h2, rank: 1}", "{name: h2, rank: 2}", 5, "rank 1 is"),
    ("{name: h2, rank: 1}", "{name: h2, rank: -1}", 5, "integer >= 0"),
    ("{name: h2, rank: 1}", "{name: h1}", 5, "defined twice"),
    ("{name: h2, rank: 1}", "{name: h2, rank: 1, colour: red}", 5, "unknown key 'colour'"),
    ("{name: h2, rank: 1}", "{name: 2h, rank: 1}", 5, "start with a letter"),
    ("{name: h2, rank: 1}", "{name: averyveryverylongname, rank: 1}", 5, "too long"),
    ("{name: h2, rank: 1}", "{name: h2, rank: 1, rack: s1}", 5, "rack of h2"),
    ("  switches: [s1, s2]\n", "  switches: [s1, s2, s3]\n", 2, None),  # an unlinked switch is fine
    ("    - {name: h2, rank: 1}\n", "    - {name: h2, rank: 1}\n    - {name: h3}\n", 6, "h3 has no link"),
    ("links:\n", "link:\n", 6, "unknown key 'link'"),
    ("  - [h2, s2]\n", "  - [h2, s2\n", 9, "YAML syntax"),
    ("  switches: [s1, s2]\n", "  switches: {s1: 1}\n", 2, "must be a list"),
]


@pytest.mark.parametrize("old,new,line,words", BAD)
def test_malformed_yaml_names_the_line(tmp_path, old, new, line, words):
    assert old in GOOD
    path = tmp_path / "topo.yaml"
    path.write_text(GOOD.replace(old, new, 1))
    if words is None:
        assert len(from_yaml(path)) == 5
        return
    with pytest.raises(TopologyError, match=f"^{re.escape(str(path))}:{line}: .*{re.escape(words)}") as err:
        from_yaml(path)
    assert err.value.line == line, str(err.value)
    assert words in str(err.value) and str(err.value).startswith(f"{path}:{line}: ")


def test_missing_sections_and_empty_file(tmp_path):
    path = tmp_path / "t.yaml"
    for text, words in [("", "empty"), ("nodes: {hosts: [h1]}\n", "missing 'links'"),
                        ("- 1\n", "must be a mapping")]:
        path.write_text(text)
        with pytest.raises(TopologyError, match=words) as err:
            from_yaml(path)
        assert err.value.line == 1
    with pytest.raises(TopologyError, match="cannot read"):
        from_yaml(tmp_path / "absent.yaml")


@given(switch_count=st.integers(1, 4), host_count=st.integers(1, 6), data=st.data())
@settings(max_examples=40, deadline=None)
def test_yaml_round_trip_and_bad_link_line(tmp_path_factory, switch_count, host_count, data):
    """Any generated file loads to the same links; breaking any one link reports its line."""
    sw = [f"s{i}" for i in range(1, switch_count + 1)]
    hs = [f"h{i}" for i in range(1, host_count + 1)]
    links = [[h, data.draw(st.sampled_from(sw)), data.draw(st.sampled_from([None, 10, 2.5]))] for h in hs]
    extra = data.draw(st.lists(st.sampled_from(list(itertools.combinations(sw, 2)) or [None]), unique=True))
    links += [[a, b, 40] for a, b in (e for e in extra if e)]
    text = yaml.safe_dump({"nodes": {"switches": sw, "hosts": hs}, "links": links}, default_flow_style=None)
    path = tmp_path_factory.mktemp("yaml") / "t.yaml"
    path.write_text(text)
    g = from_yaml(path)
    assert {frozenset(l[:2]) for l in links} == {frozenset(e) for e in g.edges}
    assert workers(g) == hs
    victim = data.draw(st.integers(0, len(links) - 1))
    lines = text.splitlines()
    first = next(i for i, l in enumerate(lines) if l.startswith("links:"))
    row = first + 1 + victim
    assert lines[row].startswith("- [")
    lines[row] = lines[row].replace("[", "[zz9, ", 1).replace(", " + str(links[victim][1]), "", 1)
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(TopologyError, match=f"^{re.escape(str(path))}:{row + 1}: link end 'zz9' is not a defined host or switch") as err:
        from_yaml(path)
    assert err.value.line == row + 1 and "zz9" in str(err.value)


def test_single_switch_still_in_topology():
    g = single_switch(3)
    assert build("single", workers=3).edges == g.edges
