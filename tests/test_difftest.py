"""Differential tests: random packet sequences through the twin and BMv2, and through the twin
and its batched fast path, compared packet by packet (agglab/testkit/difftest.py).

Why: the conformance vectors hold both data planes to the cases someone wrote down; here
Hypothesis draws sequences per scheme (dense, sparse, ATP, hostile: agglab/testkit/seqgen.py)
and any difference in an emitted frame, an egress port, a register or a counter fails, shrunk
to a minimal sequence that is written out as a vector file (named in the failure; replay it
with `agglab vectors run FILE --target soft`).

Registers: after every packet, the cells the twin changed so far in the sequence, read from
BMv2; after the last packet, every cell of every register (reading all ~310,000 cells after
every packet would cost ~0.2 s a packet).

CI runs 80 sequences per scheme on BMv2 (4 x 80 = 320; 15 per scheme in its second pass,
through runtime_CLI) and 80 per scheme on the batched path, derandomized (the same sequences
every run, no example database). Locally, more and
new ones: AGGLAB_DIFFTEST_EXAMPLES=2000 AGGLAB_DIFFTEST_RANDOM=1. Vectors of divergences go
to AGGLAB_DIFFTEST_OUT (default build/difftest/ in the checkout: pytest's temporary
directories are pruned by later sessions).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings

from agglab.testkit import difftest
from agglab.ground.paths import BUILD
from agglab.testkit.seqgen import PORTS, SCHEMES, sequences
from agglab.softswitch.pipeline import Pipeline

EXAMPLES = int(os.environ.get("AGGLAB_DIFFTEST_EXAMPLES", "80"))
# CI's second pass runs the bmv2 tests again through runtime_CLI (.ci/run): there the sequences
# only check that way in, so a few per scheme do (the first pass ran all of them)
BMV2_EXAMPLES = int(os.environ.get("AGGLAB_DIFFTEST_EXAMPLES",
                                   "15" if os.environ.get("AGGLAB_BMV2_API") == "runtime_CLI" else "80"))


def _settings(n: int) -> settings:
    return settings(max_examples=n, deadline=None, derandomize=not os.environ.get("AGGLAB_DIFFTEST_RANDOM"),
                    database=None, print_blob=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture,
                                           HealthCheck.data_too_large])


@pytest.fixture(scope="module")
def out_dir() -> Path:
    return Path(os.environ.get("AGGLAB_DIFFTEST_OUT") or BUILD / "difftest")


@pytest.fixture(scope="module")
def bmv2(tmp_path_factory):
    from agglab.testkit.bmv2_target import Bmv2Target, find_tools

    tools = find_tools()
    if tools is None:
        pytest.skip("needs BMv2 simple_switch, simple_switch_CLI and p4c (PATH or /opt/p4/bin)")
    target = Bmv2Target(tools, tmp_path_factory.mktemp("difftest-bmv2"), max(PORTS), log_level="warn")
    fenced = None
    try:
        target.start()
        fenced = difftest.FencedBmv2(target)
        yield fenced
    finally:
        if fenced is not None:
            fenced.close()
        target.close()


@pytest.fixture(scope="module")
def twin():
    return Pipeline(seed=1)


@pytest.fixture(scope="module")
def batched_pair():
    return Pipeline(seed=1), Pipeline(seed=1)


@pytest.mark.bmv2
@pytest.mark.root
@pytest.mark.slow
@pytest.mark.net_timeout(900)
@pytest.mark.parametrize("scheme", SCHEMES)
def test_twin_matches_bmv2(scheme, twin, bmv2, out_dir):
    @_settings(BMV2_EXAMPLES)
    @given(seq=sequences(scheme))
    def check(seq):
        difftest.run_pair(seq, twin, bmv2, out_dir)

    check()


TAKEN: dict[str, int] = {}


@pytest.mark.parametrize("scheme", SCHEMES)
def test_twin_matches_batched_path(scheme, batched_pair):
    single, batched = batched_pair

    @_settings(EXAMPLES)
    @given(seq=sequences(scheme))
    def check(seq):
        TAKEN[scheme] = TAKEN.get(scheme, 0) + difftest.run_batched(seq, single, batched)

    check()
    if scheme == "dense":        # the fast path really ran on the generated sequences
        assert TAKEN.get("dense", 0) > 0, "process_batch declined every batch of the dense sequences"


class _OtherTwin:
    """A stand-in for FencedBmv2: a second twin whose configuration loses one line (`drop`),
    so the harness's divergence path runs without BMv2."""

    def __init__(self, drop: str):
        self.p, self.drop = Pipeline(seed=1), drop

    def reset(self, commands):
        difftest.reset_twin(self.p, [c for c in commands if c != self.drop])

    def inject(self, port, frame):
        return self.p.process(port, frame)

    def read(self, cells):
        return {n: self.p.registers[n][i].astype("u8") for n, i in cells.items() if len(i)}

    def read_all(self, names):
        return {n: self.p.registers[n].astype("u8") for n in names}

    def counters(self, sizes):
        return {n: self.p.counters[n][:k] for n, k in sizes.items()}


def test_a_divergence_is_written_as_a_vector_that_replays(tmp_path):
    """Without port 2's agg_reply entry the 'BMv2' side sends job 1's result to ports 1 and 3
    only: run_pair fails at the completing packet, names a vector file, and that file fails on
    the twin and passes on the side whose outputs it recorded."""
    from agglab.testkit.conformance import run_vector
    from agglab.testkit.seqgen import SCENARIOS, Sequence
    from agglab.testkit.vectors import load

    drop = next(c for c in SCENARIOS["root"] if c.startswith("table_add agg_reply agg_set_dst 2 "))
    other = _OtherTwin(drop)
    agg = {"job": 1, "slot": 1, "exp": 130}
    seq = Sequence("dense", "root", [(p, {"from": f"h{p}", "agg": {**agg, "worker": p - 1}, "values": [p]})
                                     for p in (1, 2, 3)])
    with pytest.raises(difftest.Divergence, match="packet 3 on port 3: twin and BMv2 emit differently") as caught:
        difftest.run_pair(seq, Pipeline(seed=1), other, tmp_path)
    message = str(caught.value)
    assert "packet 3 on port 3" in message
    written = list(tmp_path.glob("diff_dense_*.yaml"))
    assert len(written) == 1 and str(written[0]) in message
    vector = load(written[0])
    assert [len(s.expect) for s in vector.steps] == [0, 0, 2]

    class OtherTarget:                         # the recording side, as a conformance target
        def reset(self, ports):
            pass

        def commands(self, lines):
            if lines and lines[0].split()[0] in ("register_read", "counter_read"):
                return [other.p.command(line) for line in lines]
            other.reset(lines)
            return [""] * len(lines)

        def inject(self, port, frame, expected):
            return other.inject(port, frame)

    run_vector(OtherTarget(), vector, ordered=True)
    from agglab.testkit.soft_target import SoftTarget
    with pytest.raises(AssertionError, match="packet 3 on port 3"):
        run_vector(SoftTarget(), vector, ordered=True)
