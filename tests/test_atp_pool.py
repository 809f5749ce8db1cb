"""A scarce pool (--atp-pool-slots) and jobs that train (--iterations, --compute-ms,
--compute-profile, --job-offsets): the pieces without a network. The network's behaviour
(the switches' registers under a pool of P) is in tests/test_e2e_atp_pool.py."""

from __future__ import annotations

import zlib

import pytest
import yaml

from agglab.emulation.training_jobs import profile_compute_ms, resolve_compute
from agglab.ground.atp_pool import POOL, seq_indices
from agglab.ground.runspec import RunSpec
from agglab.hosts.iterations import run_iterations
from agglab.pace.schedule import PROFILE_DIR

SEQ_BITS = 24


@pytest.mark.parametrize("job,gen,slots", [(0, 0, 16), (3, 7, 64), (200, 255, 1)])
def test_every_block_hashes_into_the_pool_and_maps_back(job, gen, slots):
    idx, back = seq_indices(job, gen, 500, slots, SEQ_BITS)
    assert len(set(idx.tolist())) == 500 and max(idx) < (1 << SEQ_BITS) - 1          # distinct, below FIN
    for b, i in enumerate(idx.tolist()):
        seq = gen << SEQ_BITS | i
        assert zlib.crc32(bytes([job]) + seq.to_bytes(4, "big")) % 256 < slots     # atp.p4's hash, ATP_POOL 256
        assert back[i] == b


def test_the_whole_pool_numbers_blocks_as_before():
    idx, back = seq_indices(5, 1, 300, POOL, SEQ_BITS)
    assert idx.tolist() == list(range(300)) and back[299] == 299


def test_the_static_partition_is_the_pool_split_evenly():
    spec = RunSpec(topology="fattree", k=4, workers=4, jobs=2, algorithm="switchml", atp_pool_slots=64).validate()
    assert spec.slots_per_job == 32 and spec.default_window() == 32
    four = RunSpec(topology="fattree", k=4, workers=4, jobs=4, algorithm="switchml", atp_pool_slots=64).validate()
    assert four.slots_per_job == 16 and four.default_window() == 16
    atp = RunSpec(topology="fattree", k=4, workers=4, jobs=4, algorithm="atp", atp_pool_slots=64, window=64).validate()
    assert atp.default_window() == 64                # a shared pool is not partitioned: each job may reach for all


@pytest.mark.parametrize("fields,message", [
    ({"atp_pool_slots": 300}, "--atp-pool-slots must be within 1..256"),
    ({"jobs": 4, "topology": "fattree", "k": 4, "workers": 4, "atp_pool_slots": 2}, "within 4..256"),
    ({"jobs": 2, "topology": "fattree", "k": 4, "workers": 4, "atp_pool_slots": 32, "window": 20},
     "each job owns 16 slots"),
    ({"iterations": 0}, "--iterations must be within"),
    ({"compute_ms": -1.0}, "--compute-ms must be non-negative"),
    ({"compute_ms": 1.0, "compute_profile": "bert-base", "bw": 5.0}, "give one"),
    ({"compute_profile": "bert-base"}, "give --bw too"),
    ({"jobs": 3, "topology": "fattree", "k": 4, "workers": 4, "job_offsets": [0.0, 1.0]}, r"one offset per job \(3\) or one step"),
])
def test_bad_pool_and_training_options_are_one_line(fields, message):
    with pytest.raises(ValueError, match=message):
        RunSpec(**fields).validate()


def test_one_offset_is_a_step_and_a_list_is_per_job():
    step = RunSpec(topology="fattree", k=4, workers=4, jobs=4, job_offsets=[0.25]).validate()
    assert [step.offset_of(j) for j in range(4)] == [0.0, 0.25, 0.5, 0.75]
    each = RunSpec(topology="fattree", k=4, workers=4, jobs=2, job_offsets=[1.0, 0.0]).validate()
    assert [each.offset_of(j) for j in range(2)] == [1.0, 0.0]


def test_a_profile_compute_keeps_its_ratio_to_the_transfer():
    """bert-base's forward + backward (read from its YAML here), dilated as its gradient's
    transfer at 100 Gb/s is by the emulated one (elements x 4 bytes at bw Mb/s)."""
    data = yaml.safe_load((PROFILE_DIR / "bert-base.yaml").read_text())
    compute = sum(x["forward_ms"] + x["backward_ms"] for x in data["layers"])
    real_transfer = sum(4 * x["params"] for x in data["layers"]) * 8 / 100e9
    emulated_transfer = 65536 * 4 * 8 / 5e6
    want = compute * emulated_transfer / real_transfer
    assert profile_compute_ms("bert-base", 5.0, 65536) == pytest.approx(want, rel=1e-9)
    spec = resolve_compute(RunSpec(compute_profile="bert-base", bw=5.0, elements=65536))
    assert spec.compute_profile is None and spec.compute_ms == pytest.approx(want, abs=1e-3)


class FakeTime:
    """A clock that moves only when slept or when the fake allreduce takes its time."""

    def __init__(self):
        self.now, self.slept = 100.0, []

    def sleep(self, s):
        self.slept.append(s)
        self.now += s

    def clock(self):
        return self.now


def test_a_job_waits_its_offset_then_computes_before_every_allreduce():
    t = FakeTime()
    spec = RunSpec(topology="fattree", k=4, workers=4, jobs=2, iterations=3, compute_ms=40.0, job_offsets=[0.5])

    def call():
        t.now += 0.06                      # the allreduce's time
        return "sum", {"packets_sent": 10, "retransmissions": 1, "blocks": 7}

    result, stats = run_iterations(call, spec, tenant=1, sleep=t.sleep, clock=t.clock)
    assert t.slept == [0.5, 0.04, 0.04, 0.04]          # the offset, then each iteration's compute
    assert result == "sum" and stats["packets_sent"] == 30 and stats["retransmissions"] == 3
    assert stats["blocks"] == 7 and stats["iterations"] == 3 and stats["offset_s"] == 0.5
    assert stats["seconds"] == pytest.approx(3 * 0.1)  # from the first compute, not the offset
    assert stats["iterations_per_s"] == pytest.approx(10.0)
    assert stats["allreduce_seconds"] == pytest.approx([0.06] * 3)
