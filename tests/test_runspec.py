"""The run description: one validation with one line per bad field, and a JSON round trip."""

from __future__ import annotations

import re

import pytest

from agglab.controller import topologies
from agglab.ground.runspec import FailSpec, RunPlan, RunSpec, SwitchFailSpec, WorkerSeat


@pytest.mark.parametrize("changes,words", [
    (dict(workers=0), "--workers"),
    (dict(elements=0), "--elements"),
    (dict(dtype="int8"), "--dtype"),
    (dict(loss=1.5), "--loss"),
    (dict(window=0), "--window"),
    (dict(bw=-1.0), "--bw"),
    (dict(topology="torus"), "--topology"),
    (dict(tree="mst"), "--tree"),
    (dict(tree="bml"), "--tree bml goes with --topology bcube"),
    (dict(density=2.0), "--density"),
    (dict(pattern="striped"), "--pattern"),
    (dict(block_size=100), "--block-size"),
    (dict(zero_workers=2), "--zero-workers goes with block-sparse data"),
    (dict(fail=["s1-s2"]), "--fail 's1-s2'"),
    (dict(topology="bcube", tree="bml", bml_variant="host", fail=["tree@0.5"]), "host variant does not re-plan"),
    (dict(fail_switch=["a1"]), "--fail-switch 'a1': expected NAME@FRACTION"),
    (dict(fail_switch=["a1@"]), "--fail-switch 'a1@': expected NAME@FRACTION"),
    (dict(fail_switch=["a1-c1@0.5"]), "expected NAME@FRACTION"),
    (dict(fail_switch=["a1@1.5"]), "the fraction must be within 0..1, got 1.5"),
    (dict(fail_switch=["a1@x"]), "expected NAME@FRACTION"),
    (dict(topology="bcube", tree="bml", bml_variant="host", fail_switch=["tree@0.5"]),
     "host variant does not re-plan"),
])
def test_bad_fields_are_refused_with_one_line_naming_the_option(changes, words):
    with pytest.raises(ValueError, match=re.escape(words)) as info:
        RunSpec(**changes).validate()
    assert words in str(info.value) and "\n" not in str(info.value)


def test_plan_round_trips_through_json(tmp_path):
    spec = RunSpec(workers=3, elements=1000, algorithm="omnireduce", density=0.25, fail=["tree@0.5", "a1-c1@0.7"],
                   length_override={2: 999}, topology="fattree", k=4, tree="rat").validate()
    seats = [WorkerSeat(rank=r, local_ip=f"10.0.0.{r + 1}", out=f"/tmp/x/rank{r}") for r in range(3)]
    plan = RunPlan(spec, "10.255.255.254", 16, "/tmp/x/epoch.json", seats)
    back = RunPlan.read(plan.write(tmp_path / "run.json"))
    assert back.spec == spec and back.seats == seats and back.window == 16
    assert back.spec.length_override == {2: 999} and back.spec.elements_of(2) == 999
    assert back.spec.fail_specs == [FailSpec(0.5, None), FailSpec(0.7, ("a1", "c1"))]


def test_unknown_fields_in_json_are_named():
    with pytest.raises(ValueError, match="unknown run field.*wrokers"):
        RunSpec.from_dict({"wrokers": 4})


def test_sparse_data_rule():
    assert RunSpec(algorithm="omnireduce").sparse_data
    assert RunSpec(density=0.5).sparse_data
    assert not RunSpec().sparse_data


def test_fail_switch_parses_names_and_tree():
    spec = RunSpec(topology="fattree", k=4, fail_switch=["a1@0.5", "tree@0.25", "c2@1"]).validate()
    assert spec.fail_switch_specs == [SwitchFailSpec(0.5, "a1"), SwitchFailSpec(0.25, None), SwitchFailSpec(1.0, "c2")]


@pytest.mark.parametrize("text,words", [
    ("z9@0.5", "no switch 'z9'"),          # not in the topology
    ("h1@0.5", "no switch 'h1'"),          # a host, not a switch
])
def test_fail_switch_names_a_switch_of_the_topology(text, words):
    g = topologies.for_run(RunSpec(topology="fattree", k=4, workers=8))
    with pytest.raises(ValueError, match=words):
        SwitchFailSpec.parse(text).check(g)
    SwitchFailSpec.parse("a1@0.5").check(g)         # aggregation switch: fine
    SwitchFailSpec.parse("e1@0.5").check(g)         # a worker's only edge switch, named: a partition test


def test_fail_switch_tree_needs_a_switch_that_is_no_workers_only_edge_switch():
    # one switch: it is every worker's only edge switch, so tree@F could only partition
    single = topologies.for_run(RunSpec(topology="single", workers=4))
    with pytest.raises(ValueError, match="every switch of this topology is some worker's only edge switch"):
        SwitchFailSpec.parse("tree@0.5").check(single)
    # a fat-tree has aggregation and core switches that no worker hangs off alone
    SwitchFailSpec.parse("tree@0.5").check(topologies.for_run(RunSpec(topology="fattree", k=4, workers=8)))


def test_fail_switch_round_trips_through_json(tmp_path):
    spec = RunSpec(topology="fattree", k=4, fail_switch=["tree@0.5", "a1@0.7"]).validate()
    seats = [WorkerSeat(rank=0, local_ip="10.0.0.1", out="/tmp/x/rank0")]
    back = RunPlan.read(RunPlan(spec, "10.255.255.254", 8, None, seats).write(tmp_path / "run.json"))
    assert back.spec.fail_switch == ["tree@0.5", "a1@0.7"]
