"""Which tree each slot of a job's window uses: the `tree_of_slot` of the epoch file.

Why a module of its own: the job partitions its slots when it installs trees and before each
allreduce (controller/tree_job.py), and a reroute partitions them again over the new trees,
preferring for each slot a new tree rooted where its old one was (controller/reroute/), so
that its carried result stays where it is; both use this one rule.
"""

from __future__ import annotations


def partition_slots(weights, window: int, prefer: list | None = None) -> list[int]:
    """tree_of_slot for `window` slots, proportional to weights (largest remainder), every
    tree with positive weight getting at least one slot; slots interleaved across trees.
    `prefer`: per slot, the trees it had best go to (a reroute: the new trees rooted where
    the slot's old root was, so its carried result stays where it is, see
    controller/reroute/failover.kept_rows); a slot gets one of them while that tree has slots
    left of its share (the shares do not change), the other slots are interleaved as without."""
    live = [(t, w) for t, w in enumerate(weights) if w > 0]
    if not live:
        raise ValueError("no tree has positive weight")
    if window < len(live):
        live = sorted(live, key=lambda tw: -tw[1])[:window]
    total = sum(w for _, w in live)
    quota = {t: 1 + (window - len(live)) * w / total for t, w in live}
    counts = {t: int(q) for t, q in quota.items()}
    for t in sorted(quota, key=lambda t: counts[t] - quota[t])[: window - sum(counts.values())]:
        counts[t] += 1
    order: list = [None] * window
    given = {t: 0 for t in counts}
    for i, wanted in enumerate(prefer or ()):
        t = next((t for t in wanted if t in counts and given[t] < counts[t]), None)
        if t is not None:
            order[i] = t
            given[t] += 1
    for i in range(window):     # interleave: the tree furthest behind its share goes next
        if order[i] is not None:
            continue
        t = min(counts, key=lambda t: (given[t] / counts[t] if given[t] < counts[t] else 9, t))
        order[i] = t
        given[t] += 1
    return order


def prefer_old_roots(old, new, tree_of_slot: list[int], down) -> list[list[int]]:
    """Per slot of `tree_of_slot` (over the trees of installation `old`), the trees of
    installation `new` rooted at the live switch its old tree was rooted at (partition_slots'
    `prefer`: the slot's carried result then stays where it is). `down`: the dead switches."""
    old_roots = {t: role.switch for (_sw, t), role in old.roles.items() if role.root}
    at: dict[str, list[int]] = {}
    for (sw, t), role in sorted(new.roles.items(), key=lambda item: item[0][1]):
        if role.root and sw not in down:
            at.setdefault(sw, []).append(t)
    return [at.get(old_roots.get(t), []) for t in tree_of_slot]
