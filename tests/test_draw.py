"""`agglab draw`: the SVG names every node of the topology and draws each aggregation tree
in a colour of its own, as a tree spanning the workers; `--fail` draws trees that avoid the
failed link, which is dashed. The SVG is parsed (Graphviz's own output), and what it must
show is derived from the fat-tree's definition and the tree algorithm, not from the drawing
code."""

from __future__ import annotations

import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import networkx as nx
import pytest

from agglab.controller import topologies, trees
from agglab.controller.topology import workers as worker_hosts

REPO = Path(__file__).resolve().parent.parent
SVG = "{http://www.w3.org/2000/svg}"
GREY = "#c8c8c8"
BLACK = "#000000"


def _draw(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "agglab", "draw", *args], cwd=REPO, capture_output=True,
                          text=True, timeout=120)


def _parse(path: Path) -> tuple[set[str], dict[tuple[str, str], tuple[set[str], bool]]]:
    """(node names, {link: (stroke colours, dashed)}) of a Graphviz SVG."""
    root = ET.parse(path).getroot()
    nodes, edges = set(), {}
    for g in root.iter(f"{SVG}g"):
        title = g.find(f"{SVG}title")
        if title is None:
            continue
        if g.get("class") == "node":
            nodes.add(title.text)
        elif g.get("class") == "edge":
            a, b = title.text.split("--")
            paths = list(g.iter(f"{SVG}path"))
            edges[tuple(sorted((a, b)))] = ({p.get("stroke") for p in paths},
                                            any(p.get("stroke-dasharray") for p in paths))
    return nodes, edges


def _fat_tree_names(k: int) -> set[str]:
    """A k-ary fat-tree's nodes by its definition: (k/2)^2 cores, k^2/2 aggregation and edge
    switches, k^3/4 hosts."""
    half = k // 2
    return ({f"c{i + 1}" for i in range(half * half)} | {f"a{i + 1}" for i in range(k * half)}
            | {f"e{i + 1}" for i in range(k * half)} | {f"h{i + 1}" for i in range(k ** 3 // 4)})


def _trees_by_colour(edges) -> dict[str, set[tuple[str, str]]]:
    out: dict[str, set] = {}
    for link, (colours, dashed) in edges.items():
        for c in colours - {GREY, BLACK}:
            out.setdefault(c, set()).add(link)
    return out


def _assert_spanning_trees(by_colour, workers, avoid=None):
    for colour, links in by_colour.items():
        t = nx.Graph(list(links))
        assert nx.is_tree(t), f"{colour}: {sorted(links)} is not a tree"
        assert set(workers) <= set(t.nodes), f"{colour} misses workers {set(workers) - set(t.nodes)}"
        if avoid:
            assert tuple(sorted(avoid)) not in links, f"{colour} still uses the failed link {avoid}"


def test_fattree_svg_names_all_nodes_one_colour_per_tree(tmp_path):
    out = tmp_path / "x.svg"
    r = _draw(tmp_path, "fattree", "--k", "4", "--workers", "8", "--tree", "rat", "-o", str(out))
    assert r.returncode == 0, r.stderr
    nodes, edges = _parse(out)
    assert _fat_tree_names(4) <= nodes
    assert len(_fat_tree_names(4)) == 36
    g = topologies.fat_tree(4, workers=8)
    expected = trees.compute("rat", g)
    by_colour = _trees_by_colour(edges)
    assert len(by_colour) == len(expected.trees) > 1         # one colour per tree
    _assert_spanning_trees(by_colour, worker_hosts(g))
    assert {tuple(sorted(e)) for e in g.edges} == set(edges)  # every link drawn once


def test_fail_draws_rerouted_trees_and_a_dashed_link(tmp_path):
    g = topologies.fat_tree(4, workers=8)
    used = sorted(e for t in trees.compute("rat", g).trees for e in t.edges
                  if g.nodes[e[0]]["kind"] == g.nodes[e[1]]["kind"] == "switch")
    link = used[0]
    out = tmp_path / "f.svg"
    r = _draw(tmp_path, "fattree", "--tree", "rat", "--fail", f"{link[0]}-{link[1]}", "--each", "-o", str(out))
    assert r.returncode == 0, r.stderr
    _, edges = _parse(out)
    colours, dashed = edges[tuple(sorted(link))]
    assert dashed and colours == {BLACK}, colours
    _assert_spanning_trees(_trees_by_colour(edges), worker_hosts(g), avoid=link)
    _, before = _parse(tmp_path / "f-step0.svg")             # --each: the trees before the failure
    assert any(c != GREY for c in before[tuple(sorted(link))][0])


@pytest.mark.parametrize("args, says", [
    (["fattree", "--fail", "a1-h99", "-o", "x.svg"], "no link"),
    (["fattree", "-o", "x.jpg"], ".svg, .png or .dot"),
    (["nosuch", "-o", "x.svg"], "must be one of"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, args, says):
    r = _draw(tmp_path, *args)
    assert r.returncode == 2 and says in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_text_marks_the_failed_link_and_what_changed():
    """The lab's `show` text: the failed link is named as down, and the tree that lost it says so."""
    from agglab.controller import drawing

    g = topologies.fat_tree(4, workers=8)
    first = trees.compute("rat", g)
    link = sorted(e for t in first.trees for e in t.edges if all(g.nodes[n]["kind"] == "switch" for n in e))[0]
    epochs = drawing.after_failures(g, "rat", worker_hosts(g), [link])
    g.edges[link]["up"] = False              # the lab's graph, as the controller marked it
    text = drawing.as_text(g, epochs[-1].treeset, epochs[0].treeset)
    assert f"links down: {link[0]}-{link[1]}" in text
    assert f"-{link[0]}-{link[1]} (down)" in text
    assert text.startswith("epoch 1 (rat)") and "changed since epoch 0:" in text
    for t in epochs[-1].treeset.trees:
        assert f"root {t.root}" in text


def test_lab_stats_table_is_aligned_and_explained():
    pytest.importorskip("mininet")
    from agglab.lab import COUNTERS, stats_table

    rows = {"a1": {"contributions": 12, "completions": 3, "rejected_no_entry": 128},
            "c10": {"contributions": 1234567, "completions": 0, "rejected_no_entry": 0}}
    lines = stats_table(rows, "of the last allreduce").splitlines()
    table = lines[1:5]                                      # header, a1, c10, total
    assert [line.split()[0] for line in table] == ["switch", "a1", "c10", "total"]
    ends = {len(line) for line in table}
    assert len(ends) == 1, table                            # right-aligned columns end together
    assert table[-1].split()[1:] == ["1234579", "3", "128"]
    assert any(line.split()[0] == "rejected_no_entry" and "OLD EPOCH" in line for line in lines[5:])
    assert all(k in COUNTERS for k in ("contributions", "rejected_no_entry"))



def _tree(tid, root, parent, weight=0.5):
    from agglab.controller.trees.base import Tree

    return Tree.from_parent(tid, root, {root: None, **parent}, weight=weight)


# trees by hand on a small leaf-spine: spines s1, s2 over leaves l1, l2 (each leaf on both
# spines, and a spare link l1-l2), hosts h1 h2 on l1 and h3 h4 on l2; one tree per spine
HOSTS = {"h1": "l1", "h2": "l1", "h3": "l2", "h4": "l2"}
T_S1 = {"l1": "s1", "l2": "s1", **HOSTS}
T_S2 = {"l1": "s2", "l2": "s2", **HOSTS}


def _graph(down=()):
    g = nx.Graph()
    for child, parent in [*T_S1.items(), *T_S2.items(), ("l1", "l2")]:
        g.add_edge(child, parent, up=True)
    for a, b in down:
        g.edges[a, b]["up"] = False
    return g


def test_show_pairs_a_rerouted_tree_with_its_old_self_not_by_index():
    """A one-link reroute after which the trees come numbered the other way round reads as
    one link changed in one tree and the other tree unchanged (paired by index, both trees
    looked replaced: every link and both roots)."""
    from agglab.controller import drawing
    from agglab.controller.trees.base import TreeSet

    before = TreeSet((_tree(0, "s1", T_S1), _tree(1, "s2", T_S2)), epoch=0, tree="hand")
    rerouted = {**T_S2, "l2": "l1"}                     # l2-s2 failed: l2 joins over l1-l2
    after = TreeSet((_tree(0, "s2", rerouted), _tree(1, "s1", T_S1)), epoch=1, tree="hand")
    text = drawing.as_text(_graph(down=[("l2", "s2")]), after, before)
    assert text.split("changed since epoch 0:\n")[1].splitlines() == [
        "  tree 0 (was tree 1): -l2-s2 (down), +l1-l2",
        "  tree 1 (was tree 0): unchanged"]


def test_pair_trees_by_root_then_links_and_unpaired_ones_are_new_or_removed():
    from agglab.controller import drawing
    from agglab.controller.trees.base import TreeSet

    old_a, old_b = _tree(0, "s1", T_S1), _tree(1, "s2", T_S2)
    moved = _tree(0, "l1", {"s1": "l1", "l2": "s1", **HOSTS})   # old_a's links, rooted at l1
    stranger = _tree(1, "x9", {"y9": "x9"})                     # no root and no link in common
    pairs = drawing.pair_trees([old_a, old_b], [moved, stranger])
    assert [(o and o.root, n and n.root) for o, n in pairs] == [("s1", "l1"), (None, "x9"), ("s2", None)]
    assert drawing.tree_changes(TreeSet((old_a, old_b), epoch=0), TreeSet((moved, stranger), epoch=1)) == [
        "tree 0: root s1 -> l1", "tree 1: new, root x9", "tree 1: removed (it had root s2)"]
    # a shared root wins over more shared links: rooted at s2, 6 links shared with old_a, 5 with old_b
    same_root = _tree(0, "s2", {"l1": "s2", "s1": "l1", "l2": "s1", **HOSTS})
    assert len(same_root.edges & old_a.edges) == 6 and len(same_root.edges & old_b.edges) == 5
    pairs = drawing.pair_trees([old_a, old_b], [same_root])
    assert [(o and o.root, n and n.root) for o, n in pairs] == [("s2", "s2"), ("s1", None)]
