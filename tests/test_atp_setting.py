"""ATP in its own setting: the options that give ATP what its gain rests on.
--atp-multicast: the controller's multicast at the PS's ToR (one node per worker, on the
port of the ToR's route to it, each copy addressed by its rid); --atp-ps separate: rank 0 is
a server with no gradient of its own; another scheme ignores both."""

from __future__ import annotations

import numpy as np
import pytest

from agglab.controller import topologies
from agglab.controller.schemes.atp import copy_rid, multicast_ports
from agglab.controller.topology import port
from agglab.ground.runspec import RunSpec
from agglab.hosts.gradients import exact_sum, gradient_for, inputs_for


def test_the_ps_tor_sends_each_worker_its_copy_on_its_route():
    # 2 racks x 2 hosts, 1 spine: the PS h1 and h2 on l1, h3 and h4 on l2
    g = topologies.leaf_spine(racks=2, hosts_per_rack=2, spines=1, host_bw=10, uplink_bw=10, workers=4)
    ports = multicast_ports(g, "l1", ["h1", "h2", "h3", "h4"])
    assert ports == {1: port(g, "l1", "h2"), 2: port(g, "l1", "s1"), 3: port(g, "l1", "s1")}


def test_every_copy_has_its_own_rid_across_jobs():
    rids = {copy_rid(job, rank) for job in range(16) for rank in range(1, 32)}
    assert len(rids) == 16 * 31 and max(rids) < 1 << 16


def test_a_separate_ps_has_no_gradient_and_the_sum_is_the_workers():
    spec = RunSpec(algorithm="atp", workers=4, elements=1000, atp_ps="separate")
    assert not gradient_for(spec, 0).any()
    colocated = RunSpec(algorithm="atp", workers=4, elements=1000)
    workers_only = exact_sum([gradient_for(colocated, r) for r in (1, 2, 3)])
    assert np.array_equal(exact_sum(inputs_for(spec)), workers_only)
    assert gradient_for(colocated, 0).any()


def test_another_scheme_ignores_them_as_it_does_ps_layout():
    # a trend's series share its run keys: the static series runs beside ATP's
    spec = RunSpec(algorithm="switchml", workers=4, elements=1000, atp_ps="separate", atp_multicast=True).validate()
    assert not spec.ps_only and gradient_for(spec, 0).any()


@pytest.mark.parametrize("fields,message", [
    ({"algorithm": "atp", "atp_ps": "apart"}, "--atp-ps must be colocated or separate"),
    ({"algorithm": "atp", "atp_ps": "separate", "workers": 1}, "--workers >= 2"),
])
def test_bad_atp_options_are_one_line(fields, message):
    with pytest.raises(ValueError, match=message):
        RunSpec(**fields).validate()
