"""Standby trees (controller/standby.py) and the bulk reroute's helpers: a reroute installs trees computed before the failure.

The standby process must hand back, per failed link, the trees the controller would have
computed itself with that link down; a reroute must then take them instead of computing.
"""

from __future__ import annotations

import contextlib
import json

import numpy as np

from agglab.testkit.waits import wait_until
from agglab.controller import topologies, trees
from agglab.controller.reroute import failover
from agglab.controller.addressing import assign_addresses
from agglab.controller.standby import StandbyWorker
from agglab.controller.topology import workers as ranked_workers
from agglab.hosts.workload import make_gradient
from agglab.testkit.treenet import PipeClient, TreeNet


def fat_tree(workers: int = 8):
    return assign_addresses(topologies.build("fattree", k=4, workers=workers))


def wait_for(cond, seconds: float = 60.0) -> bool:
    with contextlib.suppress(AssertionError):
        return bool(wait_until(cond, seconds))
    return bool(cond())


def test_the_standby_process_hands_back_each_failed_links_trees():
    g = fat_tree()
    workers = ranked_workers(g)
    active = trees.compute("spt", g, workers)
    links = sorted(e for t in active.trees for e in t.edges if all(g.nodes[n]["kind"] == "switch" for n in e))[:2]
    got = {}
    StandbyWorker.get().submit("spt", g.copy(), workers, [(u, v, (u, v)) for u, v in links], got.__setitem__)
    assert wait_for(lambda: len(got) == 2), got
    for u, v in links:
        assert not got[u, v].uses(u, v)                       # the failed link is avoided
        g.edges[u, v]["up"] = False
        assert [t.edges for t in got[u, v].trees] == [t.edges for t in trees.compute("spt", g, workers).trees]
        g.edges[u, v]["up"] = True


def test_a_reroute_takes_the_standby_trees_and_stays_exact(tmp_path):
    net = TreeNet(fat_tree(), "spt", 64, tmp_path / "epoch.json", loss=0.02, seed=5)
    job = net.job
    link = sorted(e for t in job.trees().trees for e in t.edges
                  if all(job.g.nodes[n]["kind"] == "switch" for n in e))[0]
    assert wait_for(lambda: ("spt", job._down_links() | {frozenset(link)}) in job._standby)
    arrays = [make_gradient(r, 16_384, "int32", 5) for r in range(8)]
    results, _ = net.run(arrays, fail_at=(0.5,), pick=lambda _job, _i: link, window=64, give_up=60.0)
    expected = np.sum(np.stack(arrays).astype(np.int64), axis=0).astype(np.int32)
    assert all(np.array_equal(out, expected) for out, _stats in results)
    (record,) = job.failure_records()
    assert record["standby"] is True and record["link"] == f"{link[0]}-{link[1]}"
    assert not job.trees().uses(*link)


def test_wait_standby_returns_once_every_tree_link_failure_is_computed(tmp_path):
    """What the session waits for before it lets the workers start (emulation/workers.py)."""
    net = TreeNet(fat_tree(), "spt", 64, tmp_path / "epoch.json")
    job = net.job
    assert job.wait_standby(60)
    down = job._down_links()
    tree_links = {frozenset(e) for t in job.trees().trees for e in t.edges}
    assert all(("spt", down | {link}) in job._standby for link in tree_links)
    assert job.events.of_kind("standby_ready")
    job.stop()
    assert job.wait_standby(0)                 # a stopped job leaves nobody waiting


def test_preload_writes_are_coalesced_into_ranges_keeping_the_last_write():
    client = PipeClient("s1")
    lines = ["register_write agg_count 5 2", "register_write agg_count 3 2", "register_write agg_count 4 2",
             "register_write agg_bitmap 9 3", "register_write agg_count 5 7"]
    assert failover.coalesce_writes(client, lines) == [
        "register_write_range agg_count 3 2 2 7", "register_write_range agg_bitmap 9 3"]
    client.commands(failover.coalesce_writes(client, lines))
    regs = client.pipeline.register_arrays
    assert [int(v) for v in regs["agg_count"].data[3:6]] == [2, 2, 7] and int(regs["agg_bitmap"].data[9]) == 3


def test_cell_writes_text_and_binary_forms_leave_the_same_registers():
    """SwitchClient.register_write_cells_lines (range writes: BMv2's form) and the software
    switch's one binary command per register: unsorted cells, a cell written twice (the later
    value stays), values past 32 bits (the register keeps its low bits); scattered cells go by
    index (register_write_cells), long runs as runs (register_write_runs)."""
    from agglab.controller.switch_client import SwitchClient

    index = [70, 3, 4, 5, 3, 200]
    values = [9, 1, 2, 3, 8, 2**32 + 6]
    text, binary = PipeClient("t"), PipeClient("b")
    lines = SwitchClient.register_write_cells_lines(text, "agg_bitmap", index, values)
    assert all(line.startswith("register_write_range ") for line in lines)
    text.commands(lines)
    [line] = binary.register_write_cells_lines("agg_bitmap", index, values)
    assert line.startswith("register_write_cells agg_bitmap ")
    binary.commands([line])
    got = binary.pipeline.register_arrays["agg_bitmap"].data
    assert np.array_equal(got, text.pipeline.register_arrays["agg_bitmap"].data)
    assert [int(got[i]) for i in (3, 4, 5, 70, 200)] == [8, 2, 3, 9, 6]
    runs = list(range(1000, 1064)) + list(range(1500, 1600)) + [7]          # two long runs, one cell
    [line] = binary.register_write_cells_lines("agg_exp", runs, [i % 251 for i in runs])
    assert line.startswith("register_write_runs agg_exp ")
    binary.commands([line])
    text.commands(SwitchClient.register_write_cells_lines(text, "agg_exp", runs, [i % 251 for i in runs]))
    assert np.array_equal(binary.pipeline.register_arrays["agg_exp"].data,
                          text.pipeline.register_arrays["agg_exp"].data)
    runs = [(3, 3), (70, 1)]
    assert binary.parse_read_runs(runs, binary.commands(binary.register_read_runs_lines("agg_bitmap", runs))
                                  ).tolist() == [8, 2, 3, 9]
    assert SwitchClient.parse_read_runs(text, runs, text.commands(
        SwitchClient.register_read_runs_lines(text, "agg_bitmap", runs))).tolist() == [8, 2, 3, 9]
    names = ["agg_bitmap", "agg_exp"]                       # a group: one command on the software switch
    [line] = binary.register_read_group_lines(names, runs)
    got = binary.parse_read_group(names, runs, binary.commands([line]))
    lines = SwitchClient.register_read_group_lines(text, names, runs)
    assert len(lines) == 2                                  # one per register
    want = SwitchClient.parse_read_group(text, names, runs, text.commands(lines))
    assert {n: c.tolist() for n, c in got.items()} == {n: c.tolist() for n, c in want.items()} == {
        "agg_bitmap": [8, 2, 3, 9], "agg_exp": [0, 0, 0, 0]}


class HoldingClient(PipeClient):
    """A PipeClient that takes the software switch's hold lines, as its daemon would, and
    records every command word with, for the releases, the epoch file at that moment."""

    seen: list = []                 # (switch, command word, epoch file or None), shared
    epoch_file = None

    def hold_lines(self, ms: float) -> list[str]:
        return [f"ports_hold {ms:g}"]

    def release_lines(self) -> list[str]:
        return ["ports_release"]

    def commands(self, lines: list[str]) -> list[str]:
        outs = []
        with self.lock:
            for line in lines:
                word = line.split()[0]
                if word in ("ports_hold", "ports_release"):
                    state = json.loads(self.epoch_file.read_text()) if word == "ports_release" else None
                    self.seen.append((self.name, word, state))
                    outs.append("ok")
                else:
                    self.seen.append((self.name, word, None))
                    outs.append(self.command(line))
        return outs


def test_a_reroute_holds_each_switch_first_and_releases_it_once_the_agents_are_told(tmp_path):
    net = TreeNet(fat_tree(), "spt", 64, tmp_path / "epoch.json", seed=3)
    HoldingClient.seen, HoldingClient.epoch_file = [], net.epoch_file
    for client in net.clients.values():
        client.__class__ = HoldingClient
    arrays = [make_gradient(r, 16_384, "int32", 3) for r in range(8)]
    results, _ = net.run(arrays, fail_at=(0.5,), window=64, give_up=60.0)
    expected = np.sum(np.stack(arrays).astype(np.int64), axis=0).astype(np.int32)
    assert all(np.array_equal(out, expected) for out, _stats in results)
    first = next(i for i, (_sw, word, _s) in enumerate(HoldingClient.seen) if word == "ports_hold")
    reroute = HoldingClient.seen[first:]
    held = {sw for sw, word, _s in reroute if word == "ports_hold"}
    frozen = {sw for sw, word, _s in reroute if word == "table_delete"}
    assert frozen <= held                                   # every switch of the old tree, at least
    for sw in held:
        words = [word for s, word, _st in reroute if s == sw]
        assert words[0] == "ports_hold" and words.count("ports_hold") == 1, (sw, words)
        assert words.count("ports_release") == 1 and "register_write_cells" not in words[words.index("ports_release"):]
    releases = [state for _sw, word, state in reroute if word == "ports_release"]
    assert all(state["epoch"] == 1 and state["status"] == "ok" for state in releases)
