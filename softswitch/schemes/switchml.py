"""SwitchML (`--algorithm switchml`): dense aggregation in the job's slots (aggregate.p4).

Why this module is small: the dense control is the pipeline's base, not an add-on. Every
result any scheme multicasts leaves through its egress (agg_reply), agg_stats counts for
the whole switch, and a sparse call's lead round is a dense round; so softswitch/aggregate.py
(with its exercise regions) is built by the pipeline itself, and the scheme is its branch:
agg_h flag 0, after agg_job's lookup.
"""

from __future__ import annotations

P4 = ("aggregate.p4", "Aggregate")   # the P4 control this one mirrors (p4src/include)


def build(pipeline):
    """The pipeline's dense control (softswitch/aggregate.py Aggregate)."""
    return pipeline.aggregate
