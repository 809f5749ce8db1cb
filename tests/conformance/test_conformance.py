"""Run every conformance vector on the software switch, and on BMv2 when it is installed.

Why one runner for both: the vectors are the contract that the P4 program and
the software switch implement the same thing.  Per vector: program the switch
with the vector's CLI lines, inject each frame and compare everything emitted
(port and exact bytes) with the expectation, then read registers and counters
through the CLI (so the CLI answers are part of the contract too).

The software switch must emit replicas in ascending port order; BMv2's egress
threads do not promise an order, so its outputs are compared sorted.
"""

from __future__ import annotations

import pytest

from agglab.ground import wire
from agglab.testkit.conformance import run_vector
from agglab.testkit.vectors import all_vectors

VECTORS = all_vectors()


def test_vectors_exist():
    names = {v.name for v in VECTORS}
    assert len(VECTORS) >= (4 if wire.WIDE else 10), names


@pytest.mark.parametrize("vector", VECTORS, ids=lambda v: v.name)
def test_soft(soft_target, vector):
    run_vector(soft_target, vector, ordered=True)


@pytest.mark.parametrize("vector", VECTORS, ids=lambda v: v.name)
def test_soft_batch(soft_batch_target, vector):
    """The same vectors through the daemon's batched entry (Pipeline.process_batch)."""
    run_vector(soft_batch_target, vector, ordered=True)


def test_soft_batch_takes_some_vectors_frames(soft_batch_target):
    """The batched path really ran on some of the vectors' frames (not only declined)."""
    for vector in VECTORS:
        run_vector(soft_batch_target, vector, ordered=True)
    assert soft_batch_target.batched > 0


@pytest.mark.parametrize("vector", VECTORS, ids=lambda v: v.name)
def test_soft_native(soft_native_target, vector):
    """The same vectors through the C engine (softswitch/native.py), a frame at a time."""
    run_vector(soft_native_target, vector, ordered=True)


def test_soft_native_takes_some_vectors_frames(soft_native_target):
    """The C engine really took some of the vectors' frames (not only declined)."""
    for vector in VECTORS:
        run_vector(soft_native_target, vector, ordered=True)
    assert soft_native_target.batched > 0


@pytest.mark.bmv2
@pytest.mark.root
@pytest.mark.parametrize("vector", VECTORS, ids=lambda v: v.name)
def test_bmv2(bmv2_target, vector):
    run_vector(bmv2_target, vector, ordered=False)
