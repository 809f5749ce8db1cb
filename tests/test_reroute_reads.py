"""A reroute on BMv2's path reads only the values it carries (controller/reroute/holders.py).

Why this test: BMv2 has no range read, so the old roots' agg_values were read whole (131,072
cells, a 1 MB answer per root) although a reroute carries only the slot versions some worker may
still lack. Now the per-slot registers are read first and the values of the held slot versions
alone. Here the in-process k=4 fat-tree (agglab/testkit/treenet.py: the real controller, agents
and switch pipelines) runs with clients whose batches are not atomic, so the reroute takes
BMv2's path (the freeze alone, then the reads); every agg_values read is checked, as the switch
answers it, against that switch's own registers, and the allreduce must stay exact.
"""

from __future__ import annotations

import numpy as np

from agglab.controller import topologies
from agglab.controller.addressing import assign_addresses
from agglab.hosts.sparse_workload import sparse_gradient
from agglab.hosts.workload import make_gradient
from agglab.testkit import treenet
from agglab.ground import wire

K = wire.K
ELEMENTS = 512 * K


class Bmv2PathClient(treenet.PipeClient):
    """A twin pipeline whose batches are not atomic (as BMv2's), noting for every
    `{prefix}_values` slot version read the switch's own `{prefix}_final` and `{prefix}_bitmap`
    cells at that moment (agg_ for the dense pipeline, sp_ for the sparse one)."""

    atomic_batches = False
    prefix = "agg"
    value_reads: list = []         # (switch, r, final[r], bitmap[r]); set per test

    def command(self, line: str) -> str:
        words = line.split()
        if words[:1] == ["register_read_runs"] and f"{self.prefix}_values" in words[1].split(","):
            regs = self.pipeline.registers
            final, bitmap = regs[f"{self.prefix}_final"], regs[f"{self.prefix}_bitmap"]
            for run in words[2].split(","):
                start, count = (int(x) for x in run.split("+"))
                for r in range(start // K, (start + count) // K):
                    self.value_reads.append((self.name, r, int(final[r]), int(bitmap[r])))
        return super().command(line)


def test_a_bmv2_path_reroute_reads_the_values_of_held_slot_versions_only(tmp_path, monkeypatch):
    """rat, a tree link failing half-way: each agg_values slot version read is one its switch
    completed as a root (agg_final 1) that some child has not moved on from (a bit still set
    in agg_bitmap), read once; they are exactly the carried results that do not stay in
    place; and no contribution is lost."""
    monkeypatch.setattr(Bmv2PathClient, "value_reads", [])
    monkeypatch.setattr(treenet, "PipeClient", Bmv2PathClient)
    g = assign_addresses(topologies.build("fattree", k=4, workers=8))
    net = treenet.TreeNet(g, "rat", 64, tmp_path / "epoch.json", loss=0.02, seed=1)
    assert not net.job.atomic
    arrays = [make_gradient(r, ELEMENTS, "int32", 5) for r in range(8)]
    results, injected = net.run(arrays, fail_at=(0.5,), fail_seed=1, window=64, give_up=60.0)
    errors = [f"rank {r}: {x!r}" for r, x in enumerate(results) if isinstance(x, BaseException)]
    assert not errors, "\n".join(errors)
    expected = np.sum(np.stack(arrays).astype(np.int64), axis=0).astype(np.int32)
    assert all(np.array_equal(out, expected) for out, _stats in results)
    (record,) = net.job.failure_records()
    reads = Bmv2PathClient.value_reads
    assert reads, f"no values read: {record}"
    assert [(sw, r) for sw, r, final, bitmap in reads if final != 1 or bitmap == 0] == []
    assert len({(sw, r) for sw, r, *_ in reads}) == len(reads)
    assert len(reads) == record["preloaded_slots"] - record["kept_in_place"]
    assert len(reads) < 2 * 64         # not both versions of every window slot (what was read before)


class SparseBmv2PathClient(Bmv2PathClient):
    """As Bmv2PathClient, for the sparse pipeline's sp_values."""

    prefix = "sp"
    value_reads: list = []         # set per test


def test_a_bmv2_path_sparse_reroute_reads_held_rounds_before_its_reset(tmp_path, monkeypatch):
    """omnireduce, rat, a tree link failing half-way, BMv2's path: the held rounds' sp_values
    are read with the new trees' batches, and the reset follows in the same batch (round 1),
    so every sp_values slot version read is one its switch still holds as a completed round
    (sp_final 1, a bit set): a read after the reset would find it zeroed. Read once each,
    and no contribution is lost."""
    monkeypatch.setattr(SparseBmv2PathClient, "value_reads", [])
    monkeypatch.setattr(treenet, "PipeClient", SparseBmv2PathClient)
    g = assign_addresses(topologies.build("fattree", k=4, workers=8))
    net = treenet.TreeNet(g, "rat", 64, tmp_path / "epoch.json", loss=0.02, seed=11)
    assert not net.job.atomic
    arrays = [sparse_gradient(r, ELEMENTS, "int32", 0.2, "random", K, 11, 0) for r in range(8)]
    results, injected = net.run(arrays, fail_at=(0.5,), fail_seed=3, sparse=True, window=64, give_up=60.0)
    errors = [f"rank {r}: {x!r}" for r, x in enumerate(results) if isinstance(x, BaseException)]
    assert not errors, "\n".join(errors)
    expected = np.sum(np.stack(arrays).astype(np.int64), axis=0).astype(np.int32)
    assert all(np.array_equal(out, expected) for out, _stats in results)
    (record,) = net.job.failure_records()
    reads = SparseBmv2PathClient.value_reads
    assert reads, f"no sp_values read: {record}"
    assert [(sw, r) for sw, r, final, bitmap in reads if final != 1 or bitmap == 0] == []
    assert len({(sw, r) for sw, r, *_ in reads}) == len(reads)
