"""Every layer registers every scheme of ground/schemes.py, and nothing else: the software
switch a branch for each P4 scheme, the hosts a runner for each, the controller an
installer for each and a reroute carry for each scheme aggregated on trees. A scheme added
to the table but missing from a layer fails here, naming the layer."""

from __future__ import annotations

import pytest

from ground import schemes


def test_the_table_derives_the_lists():
    assert set(schemes.NAMES) == set(schemes.SCHEMES)
    assert set(schemes.IN_NETWORK) | set(schemes.HOST_BASELINES) == set(schemes.NAMES)
    assert not set(schemes.IN_NETWORK) & set(schemes.HOST_BASELINES)
    assert set(schemes.ON_TREES) <= set(schemes.IN_NETWORK)
    for name in schemes.P4_SCHEMES:
        assert schemes.SCHEMES[name].in_network, name


def test_softswitch_has_a_branch_per_p4_scheme():
    from softswitch.pipeline import BRANCHES, Pipeline

    assert set(BRANCHES) == set(schemes.P4_SCHEMES)
    flags = [flag for flag, _, _ in BRANCHES.values()]
    assert len(set(flags)) == len(flags)                      # one flag selects one branch
    p = Pipeline()
    for name, (_, attr, _) in BRANCHES.items():
        assert callable(getattr(p, attr).ingress), name


def test_hosts_have_a_runner_per_scheme():
    from hosts.communicator import RUNNERS

    assert set(RUNNERS) == set(schemes.NAMES)


def test_controller_has_an_installer_per_scheme_and_a_carry_per_tree_scheme():
    from controller.installers import INSTALLERS
    from controller.reroute import CARRIES

    assert set(INSTALLERS) == set(schemes.NAMES)
    assert set(CARRIES) == set(schemes.ON_TREES)


@pytest.mark.parametrize("name", schemes.NAMES)
def test_every_scheme_has_a_pace_cost_and_a_valid_default_run(name):
    from ground.runspec import RunSpec
    from pace.fusion import CostModel

    cost = CostModel.for_network(name, 8, 100.0, 5.0)
    assert cost.alpha_ms > 0 and cost.beta_ms_per_byte > 0
    spec = RunSpec(algorithm=name, dtype=schemes.SCHEMES[name].dtypes[0]).validate()
    assert spec.default_window() >= 1


def test_a_scheme_refuses_a_dtype_it_cannot_sum():
    from ground.runspec import RunSpec

    with pytest.raises(ValueError, match="--algorithm atp sums int32 only"):
        RunSpec(algorithm="atp", dtype="float32").validate()
