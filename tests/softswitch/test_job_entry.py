"""The one builder of agg_job entries (agglab.softswitch.roles.job_entry, also
agglab.controller.aggregate.job_entry): each role's action and parameter order, the 8-bit
epoch, and a switch that accepts the result as a CLI line.

Why: the controller's trees, BML, the one-switch star and the test harnesses all
program agg_job through it; a wrong parameter order would only show as packets
aggregated into the wrong slots or children.
"""

from agglab.controller import aggregate
from agglab.softswitch.pipeline import Pipeline
from agglab.softswitch.roles import job_entry


def test_each_role_becomes_its_action_with_the_8_bit_epoch():
    p = Pipeline()
    entries = [job_entry(1, 2, 300, 5, child=3, fan_in=4, mgrp=7, slot_base=64, worker=3),   # at the root
               job_entry(1, 2, 300, 6, child=0, fan_in=4, mgrp=7, parent_port=9),  # inner switch
               job_entry(1, 2, 300, 9, fan_in=4, mgrp=7, slot_base=512, slots=256)]  # parent port
    for entry in entries:
        p.command(entry.command())
    got = {key: (action, params) for _h, key, action, params in p.tables["agg_job"].entries()}
    # slots: the rest of the 1024 from slot_base unless given; worker 65535 (AGG_ANY_WORKER)
    # on a port without a rank to check
    assert got == {(1, 2, 44, 5): ("agg_child", (3, 4, 7, 64, 960, 3)),
                   (1, 2, 44, 6): ("agg_child_of", (0, 4, 7, 0, 1024, 65535, 9)),
                   (1, 2, 44, 9): ("agg_from_parent", (4, 7, 512, 256))}


def test_entry_unpacks_as_table_add_arguments_and_the_controller_uses_the_same_function():
    table, action, key, params = job_entry(0, 1, 2, 3, child=1, fan_in=2, mgrp=5)
    assert (table, action, key, params) == ("agg_job", "agg_child", (0, 1, 2, 3), (1, 2, 5, 0, 1024, 65535))
    assert aggregate.job_entry is job_entry
