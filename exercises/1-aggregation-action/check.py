"""Exercise 1's checks: the aggregation action, in P4 and in its Python twin.

Its vectors (on the software switch, and on BMv2 for the P4) cover adding a contribution,
duplicates before and after completion, the completion multicast and an inner switch of a tree;
then 4 real agents must get an exact allreduce through the software switch.
"""

from __future__ import annotations

from agglab.exercise_kit import dense_allreduce, explain

TITLE = "The aggregation action: add, detect duplicates, complete, multicast"
MINUTES = 90
FILES = ("softswitch/aggregate.py", "p4src/include/aggregate.p4")
REGIONS = ("aggregate-add", "aggregate-duplicate")
VECTORS = ("first_contribution", "accumulation", "max_exponent", "completion_multicast",
           "duplicate_before_completion", "duplicate_after_completion", "tree_inner_switch", "sparse_rearm")
BMV2_RUN = dict(elements=4096)

ABOUT = ("4 agents send every block; each needs the switch to add all 4 contributions, "
         "multicast the result once complete and answer retransmissions; the conformance "
         "checks above name the first packet where your switch differs")


def checks(work):
    return [explain(dense_allreduce("allreduce 4 workers (software switch)"), ABOUT)]
