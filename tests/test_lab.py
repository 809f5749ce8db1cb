"""The interactive lab driven by a script: commands work, failures are seen and logged.

agglab.lab subclasses Mininet's CLI, so it is imported inside the test: without Mininet
the markers skip the test with a reason instead of failing collection."""

from __future__ import annotations

import re

import pytest

from agglab.ground.runspec import RunSpec
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
    # the third allreduce's --loss reached the switches' drop simulators (stats: its own counters)
    header = re.search(r"^\s+switch\s+(.*)$", out, re.M).group(1).split()
    total = re.search(r"^\s+total\s+(.*)$", out, re.M).group(1).split()
    assert "sim_dropped" in header and int(total[header.index("sim_dropped")]) > 0, out
    assert "tree rat, algorithm switchml, epoch 0" in out
    assert re.search(r"link (a1-c1|c1-a1) went down", out), out        # events, in words
    assert "contributions" in out                      # stats
    assert "slot-versions in use" in out               # slots
    assert "take link A-B down" in out                 # help text is the docstring
    assert_clean()


def test_lab_kills_and_restarts_a_switch(capsys, tmp_path):
    from agglab.lab import run_lab

    script = tmp_path / "lab.txt"
    script.write_text("\n".join([
        "kill a1",
        "kill a1",                 # already dead: one line, the lab goes on
        "kill h1",                 # not a switch: usage
        "slots a1",
        "trees",
        "allreduce 20000",
        "wait",
        "restart a1",
        "trees",
        "allreduce 20000",
        "wait",
        "events",
        "help kill",
    ]) + "\n")
    run_lab(RunSpec(topology="fattree", k=4, workers=8, tree="spt", elements=20000), script=str(script))
    out = capsys.readouterr().out
    assert "killed a1" in out and "switch a1 is not running" in out and "usage: kill SWITCH" in out
    assert "switch a1 is down" in out
    assert out.count("allreduce: exact") == 2, out
    assert out.count("switches down: a1") == 1        # the first run, not the one after the restart
    assert "restarted a1" in out
    # the events, in words (agglab/event_words.py): exited, down, up again
    assert "switch a1's process exited" in out and "switch a1 is down:" in out and "switch a1 is up again" in out
    assert "kill -9 the switch's process" in out      # help text is the docstring
    assert_clean()


def test_lab_fails_a_link_and_kills_a_switch_with_two_jobs(capsys, tmp_path):
    """The lab's `fail` and `kill` with `--jobs 2`: one event, every job whose trees use the link
    or switch reroutes (controller/job_group.py), and the next allreduce of both jobs is exact."""
    from agglab.lab import run_lab

    script = tmp_path / "lab.txt"
    script.write_text("\n".join([
        "trees",
        "fail a1 c1",
        "kill c2",
        "trees",
        "allreduce 20000",
        "wait",
        "restart c2",
        "recover a1 c1",
        "allreduce 20000",
        "wait",
        "events",
    ]) + "\n")
    run_lab(RunSpec(topology="fattree", k=4, workers=4, jobs=2, tree="spt", elements=20000), script=str(script))
    out = capsys.readouterr().out
    assert "not supported" not in out, out
    assert "killed c2" in out and "restarted c2" in out
    assert out.count("allreduce: exact") == 2, out
    assert "job 0:" in out and "job 1:" in out                  # trees per job
    assert re.search(r"switch c2 is down", out) and re.search(r"link (a1-c1|c1-a1) went down", out), out
    assert_clean()
