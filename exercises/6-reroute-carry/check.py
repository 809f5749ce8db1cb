"""Exercise 6's checks: the reroute carry, what the controller keeps of a running allreduce
when its tree changes (controller/reroute/holders.py and failover.py, the dense pipeline's carry).

Both run in process on the software twin (agglab/testkit/treenet.py: the real controller,
switch pipelines and agents, wires in threads), so they need neither root nor Mininet:
- a frozen allreduce: slot states written into the old root by hand (complete versions
  some subtree still lacks, rounds in progress), one link of the tree fails, and the new
  tree's registers must hold exactly the versions some worker still needs, as complete;
  what is expected follows from the slot states alone (not from the project's carry);
- allreduces with links failing mid-way (at 20% and 70% of the slowest worker's blocks,
  2% loss on every hop): every element must hold every worker's contribution once. Each
  worker's values are 1 modulo 64, so a sum's remainder modulo 64 counts the contributions
  in it: a wrong element says how many were lost or counted twice, and in which slot.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from agglab.exercise_kit import explain, result, short_error

TITLE = "The reroute carry: read the slots in flight at the old tree, preload them into the new"
MINUTES = 60
FILES = ("controller/reroute/holders.py", "controller/reroute/failover.py")
REGIONS = ("carry-find", "carry-preload")

WINDOW = 16
FAILED = ("a5", "c1")          # on the spt tree of the fat-tree k=4 (root c1): the new root is c2
MOD = 64                       # every contribution is 1 modulo MOD: a sum counts its contributions

# The old root c1's slot states (children a1, a3, a5, a7: bits 0..3, two workers below each):
# slot -> version -> (agg_count, agg_bitmap); count 4 = complete. A complete version whose
# bitmap still has a child's bit is needed: that subtree lacks its result, the others moved on.
FROZEN = {7: {0: (4, 0b0001), 1: (3, 0b1110)},      # v0 done, a1's subtree lacks it; v1 in progress
          12: {1: (4, 0b0100), 0: (3, 0b1011)},     # v1 done, a5's subtree lacks it; v0 in progress
          13: {0: (2, 0b0011)},                     # v0 in progress: nothing to carry
          2: {1: (4, 0b0000)}}                      # v1 done, every subtree has it: nothing needed
CARRIED = {7: 0, 12: 1}                             # slot -> the version the new tree must hold

ABOUT_FROZEN = ("when a tree changes, the new tree's switches start empty; a worker that missed a "
                "result it needs resends it under the new epoch, while the workers that got it have "
                "moved on and never resend: the new tree must already hold that version as complete "
                "(its sum at the new root, every switch's count and bitmap full), and nothing else")
ABOUT_E2E = ("8 agents on the fat-tree k=4 through the software twin's switches, 2% loss per hop; "
             "two tree links fail mid-allreduce and the controller reroutes with your carry; every "
             "element must be the sum of every worker's contribution, each counted once")


def _net(tmp: Path, loss: float = 0.0, seed: int = 0):
    from agglab.controller import topologies  # lazy: `agglab exercise list` loads this file for its title
    from agglab.controller.addressing import assign_addresses  # lazy: `agglab exercise list` loads check.py for its title
    from agglab.testkit.treenet import TreeNet  # lazy: `agglab exercise list` loads check.py for its title

    g = assign_addresses(topologies.build("fattree", k=4, workers=8))
    return TreeNet(g, "spt", WINDOW if not loss else 64, tmp / "epoch.json", loss=loss, seed=seed)


def _workers_below(tree, node: str, g) -> list[str]:
    out, todo = [], [node]
    while todo:
        n = todo.pop()
        if g.nodes[n]["kind"] == "host":
            out.append(n)
        todo += tree.children(n)
    return sorted(out, key=lambda h: (len(h), h))          # h1, h3, ..., h13: as the lab names them


def frozen_carry(name: str) -> dict:
    """FROZEN written into the old root, FAILED fails, the new tree's registers checked."""
    import time  # lazy: `agglab exercise list` loads check.py for its title

    import numpy as np  # lazy: `agglab exercise list` loads check.py for its title

    from agglab.controller.reroute.failover import slot_index  # lazy: `agglab exercise list` loads check.py for its title
    from agglab.ground import wire  # lazy: `agglab exercise list` loads check.py for its title

    with tempfile.TemporaryDirectory() as tmp:
        net = _net(Path(tmp))
        job = net.job
        try:
            job.prepare(WINDOW, "switchml")
            (root,) = [role for role in job.inst.roles.values() if role.root]
            old_tree = job.treeset.trees[0]
            regs = net.clients[root.switch].pipeline.register_arrays
            lanes = {}
            for slot, versions in FROZEN.items():
                for ver, (count, bitmap) in versions.items():
                    r = slot_index(ver, 0, slot)
                    lanes[slot, ver] = (np.arange(wire.K, dtype=np.int64) * 3 + 100 * slot + ver) & 0xFFFFFFFF
                    regs["agg_values"].data[r * wire.K:(r + 1) * wire.K] = lanes[slot, ver]
                    for reg, value in (("agg_count", count), ("agg_bitmap", bitmap), ("agg_exp", 5 + slot),
                                       ("agg_block", 1000 + slot), ("agg_rnext", 2000 + slot),
                                       ("agg_final", int(count == len(root.children)))):
                        regs[reg].data[r] = value
            job.link_changed(*FAILED, False, time.monotonic())
        except Exception as exc:
            return result(name, False, f"the reroute around {FAILED[0]}-{FAILED[1]} failed: {short_error(exc)}")
        finally:
            job.stop()
        roles = sorted((role for (_sw, t), role in job.inst.roles.items() if t == job.tree_of_slot[7]),
                       key=lambda role: (not role.root, role.switch))
        new_root = roles[0].switch

        def cell(sw: str, reg: str, index: int) -> int:
            return int(net.clients[sw].pipeline.register_arrays[reg].data[index])

        for slot, ver in sorted(CARRIED.items()):
            r = slot_index(ver, 0, slot)
            count, bitmap = FROZEN[slot][ver]
            lacking = [c for i, c in enumerate(root.children) if bitmap >> i & 1]
            have = [h for c in root.children if c not in lacking for h in _workers_below(old_tree, c, job.g)]
            lost = (f"slot {slot} of job {job.job} lost {len(have)} contributions: its version {ver}, complete "
                    f"at the old root {root.switch}, is still needed below {', '.join(lacking)}, and the "
                    f"{len(have)} workers that already have it ({', '.join(have)}) will not resend")
            for role in roles:
                fan_in, sw = len(role.children), role.switch
                want = {"agg_count": fan_in, "agg_bitmap": (1 << fan_in) - 1, "agg_block": 1000 + slot}
                if role.root:
                    want.update(agg_exp=5 + slot, agg_final=1, agg_rnext=2000 + slot)
                for reg, value in want.items():
                    got = cell(sw, reg, r)
                    if got == value:
                        continue
                    where = f"{sw}'s {reg}[{r}] (slot {slot}, version {ver}) is {got:#b}, expected {value:#b}" \
                        if reg == "agg_bitmap" else f"{sw}'s {reg}[{r}] (slot {slot}, version {ver}) is {got}, " \
                                                    f"expected {value}"
                    if reg == "agg_bitmap" and got:
                        return result(name, False, f"{where}: a resend from a child whose bit is clear is added "
                                                   f"to the carried sum a second time: slot {slot} of job "
                                                   f"{job.job} counts that child's contributions twice (and its "
                                                   f"agg_count passes the fan-in, so it never answers again)")
                    if reg in ("agg_count", "agg_bitmap") or (reg == "agg_final" and sw == new_root):
                        return result(name, False, f"{lost}: the new tree's {where}")
                    return result(name, False, f"the new tree's {where} (the old root held {value})")
            got_lanes = net.clients[new_root].pipeline.register_arrays["agg_values"].data[r * wire.K:(r + 1) * wire.K]
            bad = np.flatnonzero(np.asarray(got_lanes, np.int64) != lanes[slot, ver])
            if bad.size:
                i = int(bad[0])
                return result(name, False, f"{lost}: the new root {new_root}'s agg_values[{r * wire.K + i}] (slot "
                                           f"{slot}, version {ver}, lane {i}) is {int(got_lanes[i])}, expected "
                                           f"{int(lanes[slot, ver][i])} (the sum the old root held)")
        for slot, versions in sorted(FROZEN.items()):
            for ver, (count, bitmap) in sorted(versions.items()):
                if CARRIED.get(slot) == ver or (count == len(root.children) and not bitmap):
                    continue            # carried, checked above; or needed by nobody: either way is fine
                r = slot_index(ver, 0, slot)
                for role in roles:
                    got = cell(role.switch, "agg_count", r)
                    if got == len(role.children):
                        return result(name, False, f"slot {slot} of job {job.job}: its version {ver} held {count} "
                                                   f"of {len(root.children)} contributions at the old root (in "
                                                   f"progress), yet the new tree's {role.switch} has agg_count[{r}] "
                                                   f"{got} (complete): its workers' resends are answered with a "
                                                   f"partial sum, {len(root.children) - count} children's "
                                                   f"contributions missing")
    return result(name, True, f"slots {', '.join(map(str, sorted(CARRIED)))} carried to the new root {new_root} "
                              f"and {len(roles) - 1} switches below it; nothing in progress carried")


def rerouted_allreduce(name: str) -> dict:
    """8 workers, links failing at 20% and 70%; contributions counted per element (MOD)."""
    import numpy as np  # lazy: `agglab exercise list` loads check.py for its title

    from agglab.ground import wire  # lazy: `agglab exercise list` loads check.py for its title

    n, window, blocks = 8, 64, 256
    rng = np.random.default_rng(6)
    arrays = [(1 + MOD * rng.integers(-500, 500, blocks * wire.K)).astype(np.int32) for _ in range(n)]
    expected = np.sum(np.stack(arrays).astype(np.int64), axis=0).astype(np.int32)
    with tempfile.TemporaryDirectory() as tmp:
        net = _net(Path(tmp), loss=0.02, seed=5)
        try:
            results, injected = net.run(arrays, fail_at=(0.2, 0.7), fail_seed=1, window=window, give_up=30.0,
                                        join_timeout=120)
        except Exception as exc:
            return result(name, False, short_error(exc))
        finally:
            net.job.stop()
    failed = ", ".join(f["link"] for f in injected)
    for rank, r in enumerate(results):
        if isinstance(r, BaseException):
            return result(name, False, f"rank {rank} (links {failed} failed): {short_error(r)}")
        out = np.asarray(r[0])
        bad = np.flatnonzero(out != expected)
        if bad.size:
            e = int(bad[0])
            block = e // wire.K
            counted = int(out[e]) % MOD
            what = (f"{n - counted} of its {n} contributions lost" if counted < n else
                    f"{counted - n} contribution(s) counted twice" if counted > n else
                    "the right number of contributions, but not the right ones")
            return result(name, False, f"rank {rank}: slot {block % window} of job {net.job.job} (block {block}, round "
                                       f"{1 + block // window}): "
                                       f"element {e} is {int(out[e])}, expected {int(expected[e])}: {what} "
                                       f"(links {failed} failed)")
    preloaded = sum(f.get("preloaded_slots", 0) for f in net.job.failure_records())
    return result(name, True, f"{n} workers x {len(expected)} int32 exact across {len(injected)} reroutes "
                              f"(links {failed}); {preloaded} slot versions carried")


def checks(work):
    return [explain(frozen_carry("carry of a frozen allreduce (software twin, fat-tree k=4)"), ABOUT_FROZEN),
            explain(rerouted_allreduce("allreduce with 2 reroutes mid-way (software twin, fat-tree k=4, 2% loss)"),
                    ABOUT_E2E)]
