"""The wide program variant (AGG_K_WIDE = 256 values per packet, AGGLAB_K=256).

Why subprocesses: K is fixed when a process imports agglab.ground.wire (it sizes every
frame, register and buffer), so the variant runs in child processes started
with AGGLAB_K=256, exactly as a user's run does.  The expectations here come
from the packet format's definition (14 + 20 + 8 + 16 + 4 K bytes), not from
agglab.ground.wire.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from agglab.softswitch import native

from agglab.ground.paths import REPO

WIDE = {**os.environ, "AGGLAB_K": "256"}


def _python(*args: str, env: dict, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=timeout)


def test_the_wide_variant_sizes_the_packet_format():
    out = _python("-c", "from agglab.ground import wire; print(wire.K, wire.PAYLOAD_BYTES, wire.FRAME_BYTES)", env=WIDE)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["256", str(16 + 4 * 256), str(14 + 20 + 8 + 16 + 4 * 256)]


@pytest.mark.parametrize("value", ["100", "wide", "-64"])
def test_an_unbuilt_k_is_one_clear_line(value):
    out = _python("-m", "agglab", "--help", env={**os.environ, "AGGLAB_K": value})
    assert out.returncode == 1 and out.stdout == ""
    assert out.stderr.strip().splitlines() == [
        f"agglab: AGGLAB_K={value!r}: the P4 program is built for K in 64, 256 (constants.p4 AGG_K, AGG_K_WIDE)"]


def _conformance(selection: str) -> subprocess.CompletedProcess:
    # this test already holds the network turn (AGGLAB_NET_LOCK, tests/conftest.py) for its child
    env = {k: v for k, v in WIDE.items() if k != "AGGLAB_NET_LOCK"}
    return _python("-m", "pytest", "-v", "-p", "no:cacheprovider", "tests/conformance", "-k", selection,
                   env=env, timeout=900)


def _passed(out: subprocess.CompletedProcess) -> int:
    m = re.search(r"(\d+) passed", out.stdout)
    return int(m.group(1)) if m else 0


def test_wide_vectors_pass_on_the_software_switch():
    """vectors/k256/: 256 lanes summed, r * 256 register layout, the 1048-byte UDP length."""
    out = _conformance("test_soft or test_vectors_exist")
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]
    wide = sorted(p.stem for p in (REPO / "p4src/vectors/k256").glob("*.yaml"))
    assert len(wide) >= 4
    paths = ["test_soft", "test_soft_batch"] + (["test_soft_native"] if native.AVAILABLE else [])
    for name in wide:
        for path in paths:
            assert f"{path}[{name}] PASSED" in out.stdout, (path, name)
    # each path once per vector, + test_vectors_exist and each fast path's takes-some-frames test
    assert _passed(out) == len(paths) * len(wide) + len(paths)


@pytest.mark.bmv2
@pytest.mark.root
@pytest.mark.net_timeout(900)
def test_wide_vectors_pass_on_bmv2():
    """The same vectors on simple_switch running agglab.p4 compiled with -DAGG_K=256."""
    out = _conformance("test_bmv2")
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]
    wide = sorted(p.stem for p in (REPO / "p4src/vectors/k256").glob("*.yaml"))
    for name in wide:
        assert f"test_bmv2[{name}] PASSED" in out.stdout
    assert _passed(out) == len(wide)


@pytest.mark.root
@pytest.mark.mininet
@pytest.mark.parametrize("extra", [[], ["--loss", "0.02"],
                                   ["--algorithm", "omnireduce", "--density", "0.2", "--loss", "0.02"]],
                         ids=["dense", "dense-loss", "sparse-loss"])
def test_an_allreduce_in_the_wide_variant_is_exact(extra):
    elements = 256 * 40 + 3
    out = _python("-m", "agglab", "allreduce", "--workers", "3", "--elements", str(elements), "--json",
                  *extra, env=WIDE, timeout=240)
    assert out.returncode == 0, out.stderr[-3000:]
    r = json.loads(out.stdout)
    assert r["exact"] and r["max_abs_error"] == 0, r
    assert r["values_per_packet"] == 256
    if not extra:
        # one switch completion per 256-value block (41), plus the window's closing round each
        assert r["switch"]["contributions"] == 3 * r["switch"]["completions"]
        assert 41 <= r["switch"]["completions"] < -(-elements // 64)
