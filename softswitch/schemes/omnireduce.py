"""OmniReduce (`--algorithm omnireduce`): block-sparse aggregation (sparse.p4), the packets
flagged AGG_FLAG_SPARSE, after agg_job's lookup.

The control itself is softswitch/sparse.py (the exercises edit it there); this module adds
its sp_ registers and hooks it into the dense control, as agglab.p4 does: a completed dense
round re-arms the slot's sparse state (SparseRearm), and a sparse call's lead round
registers each child's first sparse block (announce/first).
"""

from __future__ import annotations

from agglab.softswitch import sparse

P4 = ("sparse.p4", "Sparse")   # the P4 control this one mirrors (p4src/include)


def build(pipeline):
    pipeline.register_arrays.update(sparse.make_state())
    control = sparse.Sparse(pipeline.register_arrays, pipeline.stats)
    control.agg_job = pipeline.agg_job   # which ports lead to workers (a release goes only there)
    pipeline.aggregate.on_complete = control.rearm
    pipeline.aggregate.lead = control
    pipeline.sparse = control            # the batch path re-arms through it (softswitch/batch.py)
    return control
