"""The interactive lab driven by a script: commands work, failures are seen and logged.

agglab.lab subclasses Mininet's CLI, so it is imported inside the test: without Mininet
the markers skip the test with a reason instead of failing collection."""

from __future__ import annotations

import re

import pytest

from ground.runspec import RunSpec
from tests.leftovers import assert_clean

pytestmark = [pytest.mark.root, pytest.mark.mininet, pytest.mark.slow]


def test_scripted_lab_session(capsys, tmp_path):
    from agglab.lab import run_lab

    script = tmp_path / "lab.txt"
    script.write_text("\n".join([
        "trees",
        "allreduce 30000",
        "wait",
        "fail a1 c1",
        "trees",
        "allreduce 30000 --tree spt",
        "wait",
        "allreduce 20000 --loss 0.05",
        "wait",
        "stats",
        "slots e1 2",
        "events",
        "recover a1 c1",
        "help fail",
    ]) + "\n")
    run_lab(RunSpec(topology="fattree", k=4, workers=8, tree="rat", elements=30000), script=str(script))
    out = capsys.readouterr().out
    assert out.count("allreduce: exact") == 3, out
    # the third allreduce's --loss reached the switches' drop simulators
    assert sum(int(n) for n in re.findall(r"sim_dropped (\d+)", out)) > 0, out
    assert "algorithm rat, epoch 0" in out
    assert "link_down" in out and "a1-c1" in out.replace("c1-a1", "a1-c1")
    assert "contributions" in out                      # stats
    assert "slot-versions in use" in out               # slots
    assert "take link A-B down" in out                 # help text is the docstring
    assert_clean()
