"""Exercise 3's checks: OmniReduce's min(next) rule, in P4 and in its Python twin.

Its vectors cover first and new rounds, skipped blocks, a column's end, an inner switch,
duplicates and probes; then 4 real agents must agree on every round of a sparse allreduce.
"""

from __future__ import annotations

from agglab.exercise_kit import allreduce_soft, explain
from agglab.ground.wire import K

TITLE = "Block-sparse aggregation: the min(next) rule"
MINUTES = 60
FILES = ("softswitch/sparse.py", "p4src/include/sparse.p4")
REGIONS = ("sparse-min-next",)
VECTORS = ("sparse_first_round", "sparse_completion", "sparse_skip_block", "sparse_new_round",
           "sparse_column_done", "sparse_tree_inner", "sparse_duplicates", "sparse_probe")
BMV2_RUN = dict(elements=16384, algorithm="omnireduce", density=0.2)

ABOUT = ("the agents trust the next block the switch announces in each result; when it is "
         "not the minimum of the children's announcements, they disagree on the next round; "
         "the conformance checks above show the first packet where your switch differs")


def sparse_allreduce(name: str) -> dict:
    from agglab.hosts.sparse_workload import expected_sparse_sum, sparse_gradient  # lazy: loads numpy, only sparse_allreduce() needs it (`agglab exercise list` loads check.py for its title)

    n, length = 4, 64 * K * 4
    arrays = [sparse_gradient(r, length, "int32", 0.2, "random", K, seed=5) for r in range(n)]
    expected = expected_sparse_sum(n, length, "int32", 0.2, "random", K, seed=5)
    return allreduce_soft(name, n, arrays, expected, sparse=True, window=6)


def checks(work):
    return [explain(sparse_allreduce("sparse allreduce 4 workers (software switch)"), ABOUT)]
