"""Every layer has a module for every scheme of ground/schemes.py, and nothing else: the
software switch one per P4 scheme (softswitch/schemes), the hosts and the controller one per
scheme (hosts/schemes, controller/schemes), each found by the row's name; the registries
(BRANCHES, RUNNERS, INSTALLERS, CARRIES, the wire models) are built from them, and
p4src/agglab.p4's include, instance and branch are generated from the rows (include/schemes.p4). A scheme added
to the table but missing from a layer fails here (or at import), naming the layer."""

from __future__ import annotations

import pytest

from agglab.ground import schemes


def test_the_table_derives_the_lists():
    assert set(schemes.NAMES) == set(schemes.SCHEMES)
    assert set(schemes.IN_NETWORK) | set(schemes.HOST_BASELINES) == set(schemes.NAMES)
    assert not set(schemes.IN_NETWORK) & set(schemes.HOST_BASELINES)
    assert set(schemes.ON_TREES) <= set(schemes.IN_NETWORK)
    for name in schemes.P4_SCHEMES:
        assert schemes.SCHEMES[name].in_network, name


def test_softswitch_has_a_branch_per_p4_scheme():
    from agglab.softswitch import schemes as twin
    from agglab.softswitch.pipeline import Pipeline

    assert set(twin.discover()) == set(twin.BRANCHES) == set(schemes.P4_SCHEMES)
    flags = [flag for flag, _ in twin.BRANCHES.values()]
    assert len(set(flags)) == len(flags)                      # one flag selects one branch
    assert twin.BRANCHES["switchml"] == (0, True) and twin.BRANCHES["atp"] == (32, False)
    p = Pipeline()
    for name in twin.BRANCHES:
        assert callable(p.controls[name].ingress), name


def test_the_twins_registers_are_the_p4_programs():
    """The twin's registers, as the schemes' modules build them, are the P4 program's, at the
    widths it declares (the width every vector's register values are read at)."""
    from agglab.testkit.vectors import REGISTER_WIDTHS
    from agglab.softswitch.pipeline import Pipeline

    p = Pipeline()
    assert {name: reg.width for name, reg in p.register_arrays.items()} == REGISTER_WIDTHS
    assert REGISTER_WIDTHS["atp_owner_job"] == 8 and REGISTER_WIDTHS["sp_next"] == 32


def test_agglab_p4_expands_the_generated_include_instance_and_branch_of_each_p4_scheme():
    from agglab.softswitch.schemes import p4_gaps, render_p4

    assert p4_gaps() == []
    text = render_p4()
    assert text.index('#include "aggregate.p4"') < text.index('#include "sparse.p4"') < text.index('#include "atp.p4"')
    instances = text[text.index("#define AGGLAB_SCHEME_INSTANCES"):].split("\n\n")[0]
    assert [line.strip(" \\") for line in instances.splitlines()[1:]] == [
        "Aggregate() aggregate;", "Sparse() sparse;", "Atp() atp;"]
    own = text[text.index("#define AGGLAB_OWN_TABLE_BRANCHES"):].split("\n\n")[0]
    role = text[text.index("#define AGGLAB_ROLE_BRANCHES"):].split("\n\n")[0]
    assert "AGG_FLAG_ATP" in own and "atp.apply(" in own and "AGG_FLAG_SPARSE" not in own
    assert "AGG_FLAG_SPARSE" in role and "sparse.apply(" in role and "AGG_FLAG_ATP" not in role
    assert own.endswith("} else") and role.endswith("} else")


def test_a_program_not_using_the_generated_lines_is_named(tmp_path):
    from agglab.ground.paths import P4SRC
    from agglab.softswitch.schemes import p4_gaps

    text = (P4SRC / "agglab.p4").read_text()
    (tmp_path / "include").symlink_to(P4SRC / "include")
    program = tmp_path / "agglab.p4"
    program.write_text(text.replace('#include "include/schemes.p4"', "").replace("    AGGLAB_ROLE_BRANCHES", "    "))
    assert p4_gaps(program) == ['agglab.p4 has no #include "include/schemes.p4"',
                                "AgglabIngress does not expand AGGLAB_ROLE_BRANCHES"]
    program.write_text(text.replace("aggregate.apply(", "aggregate_off("))
    assert p4_gaps(program) == ["switchml: AgglabIngress never applies aggregate (the dense default)"]


def test_the_schemes_flags_are_distinct_bits_beside_the_wire_formats_own():
    """A scheme's flag is #defined in its own .p4 (ground/wire.py reads every include): one bit,
    none shared with another scheme or with the header's own flags."""
    from agglab.ground import wire

    own = [wire.CONST[f"AGG_FLAG_{name}"] for name in ("RESULT", "RETX", "ACK", "LEAD")]
    flags = [s.flag_bits for s in schemes.SCHEMES.values() if s.flag]
    assert flags == [4, 32]
    for flag in flags:
        assert flag & (flag - 1) == 0 and not flag & sum(own)
    assert len(set(flags)) == len(flags)


def test_a_define_given_two_values_is_refused(tmp_path):
    from agglab.ground import wire

    (tmp_path / "constants.p4").write_text("#define AGG_K 64\n")
    (tmp_path / "atp.p4").write_text("#define ATP_POOL 256\n#define AGG_K 64\n")
    assert wire.read_all_constants(tmp_path) == {"AGG_K": 64, "ATP_POOL": 256}
    (tmp_path / "myatp.p4").write_text("#define ATP_POOL 128\n")
    with pytest.raises(ValueError, match="myatp.p4: #define ATP_POOL 128 clashes with 256"):
        wire.read_all_constants(tmp_path)


def test_hosts_have_a_runner_per_scheme():
    from agglab.hosts import schemes as host_schemes
    from agglab.hosts.communicator import RUNNERS

    assert set(host_schemes.discover()) == set(RUNNERS) == set(schemes.NAMES)
    assert host_schemes.SERVICE_TRANSPORT == {"switchml", "omnireduce"}     # the agents' UDP transport
    assert set(host_schemes.PREPARE) == set(schemes.HOST_BASELINES)         # their TCP connections
    # the in-network agents build their call's state before the start gate (Communicator.ready)
    assert host_schemes.CALLS_READY == {"switchml", "omnireduce", "atp"}


def test_controller_has_an_installer_per_scheme_and_a_carry_per_tree_scheme():
    from agglab.controller import schemes as controller_schemes
    from agglab.controller.installers import INSTALLERS
    from agglab.controller.schemes import CARRIES, carry_for

    assert set(controller_schemes.discover()) == set(INSTALLERS) == set(schemes.NAMES)
    assert set(CARRIES) == set(schemes.ON_TREES)
    for name in schemes.ON_TREES:
        assert carry_for(name, slot_base=8).algorithm == name
    with pytest.raises(ValueError, match="no reroute carry for algorithm 'atp'"):
        carry_for("atp")


def test_the_wire_model_comes_from_the_scheme_and_a_scheme_without_one_has_no_bound(monkeypatch):
    """ATP once had no model and silently got SwitchML's tree time; a scheme without one is
    now refused (BoundError), never given another scheme's time."""
    from agglab.controller import topologies
    from agglab.emulation import wire_model
    from agglab.ground.runspec import RunSpec

    g = topologies.single_switch(4, bw=10)
    for name in ("switchml", "omnireduce", "ring", "ps"):
        assert wire_model.wire_seconds(RunSpec(algorithm=name, workers=4, bw=10), g) > 0, name
    assert wire_model.wire_seconds(RunSpec(algorithm="atp", workers=4, bw=10, dtype="int32"), g) > 0
    monkeypatch.delitem(wire_model.WIRE_MODELS, "atp")          # a scheme that names no model
    with pytest.raises(wire_model.BoundError, match="--algorithm atp has no wire model"):
        wire_model.wire_seconds(RunSpec(algorithm="atp", workers=4, bw=10, dtype="int32"), g)


def test_every_scheme_names_a_wire_model():
    from agglab.controller.schemes import WIRE_MODELS
    from agglab.emulation.wire_model import MODELS

    assert sorted(set(schemes.SCHEMES) - set(WIRE_MODELS)) == []
    assert {name: model for name, model in WIRE_MODELS.items() if model not in MODELS} == {}


def test_the_fuzzer_clears_the_flags_of_schemes_with_their_own_table():
    from agglab.hosts import fuzz

    assert fuzz.OWN_TABLE_FLAGS == schemes.SCHEMES["atp"].flag_bits == 32
    frame = bytearray(fuzz.FLAGS_AT + 1)
    frame[fuzz.FLAGS_AT] = 0xFF
    assert fuzz._without_own_tables(bytes(frame))[fuzz.FLAGS_AT] == 0xFF & ~32


@pytest.mark.parametrize("name", schemes.NAMES)
def test_every_scheme_has_a_pace_cost_and_a_valid_default_run(name):
    from agglab.ground.runspec import RunSpec
    from agglab.pace.fusion import CostModel

    cost = CostModel.for_network(name, 8, 100.0, 5.0)
    assert cost.alpha_ms > 0 and cost.beta_ms_per_byte > 0
    spec = RunSpec(algorithm=name, dtype=schemes.SCHEMES[name].dtypes[0]).validate()
    assert spec.default_window() >= 1


def test_a_scheme_refuses_a_dtype_it_cannot_sum():
    from agglab.ground.runspec import RunSpec

    with pytest.raises(ValueError, match="--algorithm atp sums int32 only"):
        RunSpec(algorithm="atp", dtype="float32").validate()
