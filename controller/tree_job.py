"""One aggregation job on a multi-switch network: trees, install, live reroute.

The job owns its trees (computed on the shared graph), their installation under an
epoch, and the epoch file that tells its agents which epoch and which tree each slot
uses. Told of a link-down (by the emulated network's netlink monitor, or a test's
in-process network) for a link an active tree uses, it reroutes with
the protocol in controller/reroute/ (a Carry per scheme); a failure elsewhere changes nothing; a
failure that partitions the workers is announced to the agents so they stop with a
clear error instead of hanging.
"""

from __future__ import annotations

import gc
import threading
import time
from contextlib import ExitStack
from pathlib import Path

import networkx as nx

from ground import wire
from ground.epoch_file import publish as publish_epoch
from ground.priority import HOLD_RT, urgent
from ground.schemes import DEFAULT as DEFAULT_SCHEME
from controller import tree_install, trees
from controller.reroute import carry_for, reset_lines
from controller.reroute.failover import drop_rows, kept_rows
from controller.events import EventLog
from controller.job_protocol import Job
from controller.standby import StandbyWorker
from controller.switch_batches import collect_batches, run_batches, run_built, send_batches
from controller.switch_client import SwitchClient, SwitchCommandError
from controller.topology import switches
from controller.trees.base import TreeError


def partition_slots(weights, window: int, prefer: list | None = None) -> list[int]:
    """tree_of_slot for `window` slots, proportional to weights (largest remainder), every
    tree with positive weight getting at least one slot; slots interleaved across trees.
    `prefer`: per slot, the trees it had best go to (a reroute: the new trees rooted where
    the slot's old root was, so its carried result stays where it is, see TreeJob.kept_rows);
    a slot gets one of them while that tree has slots left of its share (the shares do
    not change), the other slots are interleaved as without."""
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


class TreeJob(Job):
    """A job aggregating along switch trees (spt, rat, packing) that reroutes live."""

    def __init__(self, graph: nx.Graph, clients: dict[str, SwitchClient], algorithm: str,
                 workers: list[str], window: int, epoch_file: Path, job: int = 0,
                 events: EventLog | None = None, drain: float | None = None, standby: bool = True,
                 slot_base: int = 0, slots: int | None = None, reply_ports: dict | None = None):
        """`drain`: seconds a reroute waits after the freeze for packets in flight (default:
        none when every switch runs a command batch between two packets, else 0.02 s: a BMv2
        packet that matched an entry before its table_delete returned still runs its action).
        `standby`: precompute, while the job runs, the trees for every single-link failure
        of the active trees (in a niced worker process), so a reroute does not compute them.
        `slot_base`/`slots`: the job's slot range on every switch (default all of them); jobs
        that share switches get disjoint ranges, and a job with a range of its own resets
        only its own slots (never another job's). `reply_ports`: switch -> ports with an
        agg_reply entry, shared by the jobs of one network (one entry per port)."""
        self.g = graph
        self.clients = clients
        self.algorithm = algorithm
        self.workers = workers
        self.window = window
        self.epoch_file = Path(epoch_file)
        self.job = job
        Job.__init__(self, events)
        self.bulk = all(c.pipelined_batches for c in clients.values())
        self.atomic = all(c.atomic_batches for c in clients.values())
        self.drain = (0.0 if self.atomic else 0.02) if drain is None else drain
        self.standby = standby
        self._standby: dict = {}            # (algorithm, frozenset of down links) -> TreeSet | TreeError
        # set while no standby computation is pending (the session starts workers once it is:
        # the standby's CPU must not be taken from a measured allreduce, see wait_standby)
        self.standby_settled = threading.Event()
        self.standby_settled.set()
        self.treeset = None
        self.inst: tree_install.Installation | None = None
        self.tree_of_slot: list[int] = []
        self.reply_ports: dict = {} if reply_ports is None else reply_ports
        self.partitioned: str | None = None
        self.slot_base = slot_base
        self.slots = wire.SLOTS - slot_base if slots is None else slots
        self.carry = carry_for(DEFAULT_SCHEME, slot_base)   # what a reroute keeps: set per allreduce by prepare()
        self.stopped = False
        self.pending_reinstall: str | None = None   # a switch came back during an allreduce
        self._spent_epoch = 0          # the last epoch a failed reroute may have left entries of
        self._failed_reroute = False   # the last reroute failed half-way: the next failure reroutes

    # -- install ---------------------------------------------------------------------
    def start(self) -> "TreeJob":
        t0 = time.monotonic()
        self.treeset = trees.compute(self.algorithm, self.g, self.workers, epoch=0)
        recompute = time.monotonic() - t0
        self.tree_of_slot = partition_slots(self.treeset.weights, self.window)
        self._reset(self.live_switches())
        self.inst = self._install(self.treeset)
        self._publish()
        self.events.add("trees_installed", epoch=0, trees=len(self.treeset.trees), algorithm=self.algorithm,
                        compute_ms=round(recompute * 1e3, 2), install_ms=round(self.inst.seconds * 1e3, 2),
                        entries=self.inst.entries)
        self._precompute()
        return self

    def reinstall(self, algorithm: str | None = None, why: str = "") -> None:
        """Between allreduces: recompute (maybe with another algorithm) under a new epoch."""
        with self.locked():
            if algorithm:
                self.algorithm = algorithm
            t0 = time.monotonic()
            try:
                new = self._compute(self._down_links(), self._next_epoch())
            except TreeError as exc:
                self.partitioned = str(exc)
                self.events.add("partitioned", reason=str(exc))
                return
            t1 = time.monotonic()
            old = self.inst
            tree_install.freeze(self.clients, old)
            self.treeset = new
            self.tree_of_slot = partition_slots(new.weights, self.window)
            self.inst = self._install(new)
            try:
                tree_install.remove_groups(self.clients, old)
            except SwitchCommandError as exc:      # left by a reroute that failed half-way
                self.events.add("remove_groups_error", error=str(exc).splitlines()[0][:200])
            self._failed_reroute = False
            self._publish()
            self.events.add("trees_installed", epoch=new.epoch, trees=len(new.trees), algorithm=self.algorithm,
                            why=why, compute_ms=round((t1 - t0) * 1e3, 2),
                            install_ms=round((time.monotonic() - t1) * 1e3, 2))
            self._precompute()

    def prepare(self, window: int, algorithm: str = DEFAULT_SCHEME) -> None:
        """Before each allreduce: fresh registers, slots partitioned for this window, the
        reroute carry of the allreduce `algorithm` (controller/reroute/carry.py)."""
        with self.locked():
            if self.pending_reinstall:         # a restarted switch rejoins before the next run
                why, self.pending_reinstall = self.pending_reinstall, None
                self.partitioned = None
                self.reinstall(why=why)
            self.window = window
            self.carry = carry_for(algorithm, self.slot_base)
            self.tree_of_slot = partition_slots(self.treeset.weights, window)
            self._reset(self.live_switches())
            self._publish("partitioned" if self.partitioned else "ok", self.partitioned or "")

    def _ranks(self) -> dict[str, int]:
        return {h: rank for rank, h in enumerate(self.workers)}

    def _install(self, treeset) -> tree_install.Installation:
        """Install `treeset` in the job's slot range; each worker's port admits only its rank."""
        return tree_install.install(self.clients, self.g, treeset, self.job, slot_base=self.slot_base,
                                    reply_ports=self.reply_ports, slots=self.slots, ranks=self._ranks())

    @property
    def _shared(self) -> bool:
        """The job has a slot range of its own (other jobs use the rest of the switches' slots)."""
        return self.slot_base > 0 or self.slots < wire.SLOTS

    def _reset_lines(self, sw: str, skip: dict | None = None) -> list[str]:
        """Fresh registers on switch `sw`: all of them for a job that has every slot on a switch
        whose whole-register reset is cheap (the software switch), else only the job's slots in
        use (`window` of them from slot_base: another job's slots are never touched, and BMv2
        clears a 16,384-cell window of agg_values in one call instead of all 131,072 cells).
        `skip`: lanes register -> slot versions a reroute keeps in place (Carried.kept): the
        window's reset, without them."""
        client = self.clients[sw]
        skip = {name: rows for name, rows in (skip or {}).items() if rows}
        whole = not self._shared and client.cheap_register_reset and not skip
        return reset_lines(client, None if whole else (self.slot_base, self.window), skip)

    def _prefer(self, old, new, down) -> list[list[int]]:
        """Per slot, the new trees rooted at the live switch its old tree was rooted at
        (partition_slots' `prefer`: the slot's carried result then stays where it is)."""
        old_roots = {t: role.switch for (_sw, t), role in old.roles.items() if role.root}
        at: dict[str, list[int]] = {}
        for (sw, t), role in sorted(new.roles.items(), key=lambda item: item[0][1]):
            if role.root and sw not in down:
                at.setdefault(sw, []).append(t)
        return [at.get(old_roots.get(t), []) for t in self.tree_of_slot]

    def _reset(self, on: list[str]) -> None:
        for sw in on:
            self.clients[sw].commands(self._reset_lines(sw))

    def _publish(self, status: str = "ok", reason: str = "") -> None:
        """Atomically replace the epoch file the agents watch (ground/epoch_file.py)."""
        publish_epoch(self.epoch_file, self.treeset.epoch if self.treeset else 0, self.tree_of_slot,
                      status, reason, tree_mbps=self.tree_mbps())

    def tree_mbps(self) -> dict:
        """Each tree's slowest shaped link (Mb/s), for the agents' timers (ground/epoch_file.py);
        trees on unshaped links are left out."""
        out = {}
        for t in self.treeset.trees if self.treeset else ():
            rates = [r for r in (self.g.edges[e].get("bw") for e in t.edges) if r]
            if rates:
                out[t.id] = min(rates)
        return out

    # -- link events -----------------------------------------------------------------
    def link_changed(self, u: str, v: str, up: bool, t: float, intf: str = "") -> None:
        """A failed link an active tree uses reroutes at once; a recovered one reinstalls
        the trees only between allreduces (`running()`)."""
        with self.locked():
            if self.stopped:           # teardown deletes interfaces: not failures
                return
            edge = self.g.edges[u, v]
            if edge.get("up", True) == up:
                return                           # the other end of the same link
            if up and edge.get("down_with"):
                return                           # a dead switch's port: it comes back with the switch
            edge["up"] = up
            self.events.add("link_up" if up else "link_down", t=t, link=f"{u}-{v}", intf=intf)
            self.link_marked(u, v, up, t)

    def link_marked(self, u: str, v: str, up: bool, t: float) -> None:
        """Link u-v is marked down or up in the shared graph (by link_changed, or by the
        JobGroup for every job of a network): reroute if an active tree uses it."""
        with self.locked():
            if not up and (self.treeset.uses(u, v) or self._failed_reroute):
                self.reroute(f"{u}-{v}", t)
            elif not up:
                self.events.add("no_reinstall", link=f"{u}-{v}", job=self.job, why="not on an active tree")
            elif up and not self.is_running:
                self.partitioned = None
                self.reinstall(why=f"link {u}-{v} recovered")

    # -- switch events ---------------------------------------------------------------
    def switch_failed(self, sw: str, t: float) -> None:
        """A dead switch: forget what was installed in it (its tables died with it), then
        reroute once around it if an active tree uses it (its links are marked down)."""
        self._forget(sw)
        if any(sw in tree.parent for tree in self.treeset.trees) or self._failed_reroute:
            # (a reroute that failed, because this switch died under it, left the job frozen)
            self.reroute(f"switch {sw}", t, switch=sw)
        else:
            self.events.add("no_reinstall", switch=sw, why="not on an active tree")

    def switch_back(self, sw: str) -> None:
        """A restarted switch rejoins: the trees are recomputed with it under a new epoch
        (installing them programs its agg_job, groups and agg_reply), now if no allreduce
        runs, else before the next one (prepare). Its agg_reply ports were forgotten when it
        died (they are shared by the jobs of a network: the first job to reinstall adds them)."""
        self._forget(sw, replies=False)
        if self.is_running:
            self.pending_reinstall = f"switch {sw} restarted"
        else:
            self.partitioned = None
            self.reinstall(why=f"switch {sw} restarted")

    def _forget(self, sw: str, replies: bool = True) -> None:
        """Handles, groups and agg_reply entries in `sw` no longer exist (it died or restarted)."""
        if replies:
            self.reply_ports.pop(sw, None)
        if self.inst is not None:
            self.inst.job_handles.pop(sw, None)
            self.inst.groups.pop(sw, None)

    def _down(self) -> frozenset:
        """The dead switches (a reroute reads and writes only live ones)."""
        return frozenset(s for s in switches(self.g) if self.g.nodes[s].get("up", True) is False)

    # -- standby trees ---------------------------------------------------------------
    def _down_links(self) -> frozenset:
        """The graph state trees depend on: the failed links, and every link's rate (the lab
        may change rates; rat and packing weigh by them)."""
        return frozenset(frozenset((u, v)) for u, v, d in self.g.edges(data=True) if not d.get("up", True)) | \
            {("bw", tuple(d.get("bw") for _, _, d in self.g.edges(data=True)))}

    def _after_failed_reroute(self, new) -> None:
        """A reroute failed half-way (a switch it needed died under it): the old epoch is frozen
        and the new one may be partly installed. Its multicast groups are destroyed where they
        may exist, and the next trees skip to the epoch after it with the other parity: group
        ids alternate with the epoch's parity (tree_install.tree_group), so that epoch's ids
        are neither the installed trees' nor any left of the failed ones, and its agg_job keys
        are new. The next failure event (usually the death that made this one fail) reroutes
        whatever it hits (`_failed_reroute`), and so does the next link or switch change."""
        self._failed_reroute = True
        if new is not None:
            groups = [tree_install.tree_group(self.job, t.id, new.epoch) for t in new.trees]
            for sw in self.live_switches():
                for g in groups:
                    try:
                        self.clients[sw].commands([f"mc_mgrp_destroy {g}"])
                    except Exception:  # noqa: BLE001 - not created there, or the switch is dead too
                        pass
            self._spent_epoch = max(self._spent_epoch, new.epoch + 1)

    def _next_epoch(self) -> int:
        """The epoch new trees go under: past the installed one and past any a failed reroute
        may have left entries of (its round 1 installs the new epoch's entries before it knows
        it will finish), which would otherwise collide (DUPLICATE_ENTRY) with the next install."""
        return max(self.treeset.epoch, self._spent_epoch) + 1

    def _compute(self, down: frozenset, epoch: int):
        """The trees with links `down` failed: precomputed if the standby has them, else now.
        Raises TreeError (partition) either way."""
        got = self._standby.get((self.algorithm, down))
        if got is None:
            got = trees.compute(self.algorithm, self.g, self.workers, epoch=epoch)
            self._standby[self.algorithm, down] = got
        if isinstance(got, TreeError):
            raise got
        return got.with_epoch(epoch)

    def _precompute(self) -> None:
        """The trees for each single-link failure of the active trees (so a reroute only installs, never computes),
        computed while the job runs by a separate, niced process (controller/standby.py): a
        thread here would hold the GIL the reroute and the link monitor need. Switch-switch links
        first (a worker's own link partitions it)."""
        if not self.standby or self.stopped:
            return
        down = self._down_links()
        links = sorted({e for t in self.treeset.trees for e in t.edges},
                       key=lambda e: (not all(self.g.nodes[n]["kind"] == "switch" for n in e), e))
        todo = [(u, v, key) for u, v in links
                if (key := (self.algorithm, down | {frozenset((u, v))})) not in self._standby]
        worker = StandbyWorker.get()                  # key: as _down_links() after u-v fails
        if todo and worker is not None:
            self.standby_settled.clear()
            worker.submit(self.algorithm, self.g.copy(), self.workers, todo, self._standby_store(len(todo)))

    def wait_standby(self, timeout: float) -> bool:
        """Wait (at most `timeout` s) until the standby trees for the current trees are all
        computed; True if they are. Why the session waits before an allreduce: the standby
        child has one CPU share like a switch (controller/standby.py), and computing 40 fat-tree
        failures plus its first imports took ~1 s of CPU from the allreduce that had just
        started (8 x 1M int32 at 20 Mb/s, one switch: 0.8 s of it); the workers import and
        prepare meanwhile (ground/start_gate.py), so the wait mostly overlaps theirs."""
        return self.standby_settled.wait(timeout)

    def _standby_store(self, count: int):
        """What the standby hands each result to: kept for the reroutes; once all `count` are
        there, a `standby_ready` event says how long they took."""
        started, got = time.monotonic(), [0]

        def store(key, trees) -> None:
            self._standby.setdefault(key, trees)
            got[0] += 1
            if got[0] == count:
                self.events.add("standby_ready", algorithm=key[0], failures=count,
                                ms=round((time.monotonic() - started) * 1e3, 1))
                self.standby_settled.set()
        return store

    def reroute(self, link: str, t_detect: float, switch: str | None = None) -> dict:
        """Freeze the old epoch, snapshot what it holds (from live switches), install the
        trees recomputed over live links and switches, preload, tell the agents. `link` names
        the cause ("a1-c1", or "switch a1" with `switch` set). This process's threads (real
        time) and the live switches' daemons run ahead of everything else meanwhile
        (ground/priority.py, as root), and the garbage collector waits until it is done."""
        t0 = time.monotonic()        # the boost below counts as part of the recompute
        collecting = gc.isenabled()
        gc.disable()                  # a full collection of the controller's heap: tens of ms
        try:
            with urgent(), ExitStack() as switches_urgent:
                def raise_switches(holding=()) -> None:   # once the first batches are on their way;
                    pids = {sw: self.clients[sw].pids() for sw in self.live_switches()}   # those about
                    switches_urgent.enter_context(urgent([p for sw in holding for p in pids[sw]], own=False,
                                                         pids_rt=HOLD_RT))                # to hold: real time
                    switches_urgent.enter_context(urgent([p for sw in pids if sw not in holding for p in pids[sw]],
                                                         own=False))
                if self.bulk:
                    return self._reroute_bulk(link, t_detect, switch, t0, raise_switches)
                raise_switches()
                return self._reroute_steps(link, t_detect, switch, t0)
        finally:
            if collecting:
                gc.enable()

    def _reroute_steps(self, link: str, t_detect: float, switch: str | None, t0: float) -> dict:
        """The reroute one step after the other (BMv2), with a drain after the freeze."""
        record = _cause(link, switch, t_detect)
        what = link if switch else f"link {link}"
        old = self.inst
        tree_install.freeze(self.clients, old)
        self._publish("rerouting", f"{what} failed")      # agents: a pause, not a stall
        phases = {"freeze_ms": time.monotonic() - t0}
        time.sleep(self.drain)                      # packets already in flight finish or miss
        ts = time.monotonic()
        carried = self.carry.snapshot(self.clients, old, self.tree_of_slot, down=self._down())
        t1 = time.monotonic()
        phases["snapshot_ms"] = t1 - ts
        try:
            new = self._compute(self._down_links(), self._next_epoch())
        except TreeError as exc:
            self._partitioned(what, exc, record, t1)
            return record
        t2 = time.monotonic()
        self.treeset = new
        self.tree_of_slot = partition_slots(new.weights, self.window)
        on_tree = sorted({sw for sw, _ in tree_install.roles_of(new, self.g)})
        self._reset(on_tree)
        ti = time.monotonic()
        self.inst = self._install(new)
        tp = time.monotonic()
        self._publish("rerouting", f"{what} failed")      # heartbeat before the preload
        writes = self.carry.preload(self.clients, self.inst, self.tree_of_slot, carried)
        phases.update(entries_ms=tp - ti, preload_ms=time.monotonic() - tp)
        self._publish()
        t3 = time.monotonic()
        tree_install.remove_groups(self.clients, old)      # after the agents were told: not urgent
        record.update(recompute_ms=round((t2 - t1) * 1e3, 2), install_ms=round((t3 - t2 + t1 - t0) * 1e3, 2))
        return self._rerouted(record, new, carried, writes, phases)

    def _reroute_bulk(self, link: str, t_detect: float, switch: str | None, t0: float, raise_switches) -> dict:
        """The reroute on switches that take pipelined batches (software switches, BMv2 over
        Thrift), in rounds of bulk batches, each sent to every switch before any answer is read:
        (1) on the old trees' live switches, the hold (softswitch/daemon.py: until the reroute
        is done a switch serves its control socket alone, at once), the old epoch's agg_job
        deletes (the freeze) and the carry's register reads (the window's cells of both
        versions; a switch's state is final once its freeze ran), sent before anything else
        (the switches' priority, the new trees, their entries) is done; then, on the new
        trees' switches, the reset where (1) reads all the carry needs, and the new epoch's
        entries and groups (harmless: no agent uses the new epoch before it is told); (2) the
        carried results' values, where (1) did not read them (from the holders only); (3) the
        reset (if not done in 1), the carry's preload, the new groups completed. A dense carry
        reads its values in (1) as well and resets there, so it needs only (1) and (3); with a
        dead switch it reads the live roots' values in (1) but resets in (3), since a dead
        root's results are read from the live switches below it in (2). The trees come from
        the standby when it has them. No drain where batches are atomic (software switches):
        once a switch answered its freeze, no packet of the old epoch touches its state;
        elsewhere (BMv2) the freeze goes out alone first, then the drain, then the rest."""
        record = _cause(link, switch, t_detect)
        boost = time.monotonic() - t0
        what = link if switch else f"link {link}"
        down = self._down()
        old = self.inst
        reads = self.carry.first_reads(old, self.tree_of_slot, down)
        frozen = sorted({sw for sw, _ in old.roles} - down)
        first = {sw: self.clients[sw].hold_lines(HOLD_MS) for sw in frozen}
        for sw, lines in tree_install.freeze_lines(old, self.clients).items():
            first.setdefault(sw, []).extend(lines)
        t_a = time.monotonic()
        if not self.atomic:                          # packets that matched before the delete
            self._publish("rerouting", f"{what} failed")
            run_batches(self.clients, first)
            time.sleep(self.drain)
            first = {}
        at: dict[str, int] = {}
        second: dict[str, list[str]] = {}

        def add_reads(batch: dict) -> None:        # after the switch's freeze: its state is final
            for sw, want in reads.items():
                at[sw] = len(batch.setdefault(sw, []))
                batch[sw] += self.carry.read_lines(self.clients[sw], want)

        if self.atomic:
            add_reads(first)
        held = set(frozen)
        pending = send_batches(self.clients, first)
        unread = [pending]                   # batches whose answers were not read yet
        new = None
        try:
            if self.atomic:      # agents: a pause, not a stall, and no resends into the frozen epoch
                self._publish("rerouting", f"{what} failed")
            tb = time.monotonic()
            raise_switches(frozen if self.atomic else ())
            boost += time.monotonic() - tb
            standby = (self.algorithm, self._down_links()) in self._standby
            try:
                new = self._compute(self._down_links(), self._next_epoch())
            except TreeError as exc:
                unread.remove(pending)
                collect_batches(pending)
                _release(self.clients, held)
                self._partitioned(what, exc, record, t0)
                return record
            t1 = time.monotonic()
            plan = tree_install.plan(self.g, new, self.job, slot_base=self.slot_base, reply_ports=self.reply_ports,
                                     slots=self.slots, ranks=self._ranks())
            new_switches = sorted({sw for sw, _ in plan.inst.roles})
            # slots stay with their old root where a new tree is rooted there: their results
            # stay in place (kept_rows), unread where the reads wait for this (BMv2), unwritten
            tree_of_slot = partition_slots(new.weights, self.window, prefer=self._prefer(old, plan.inst, down))
            keep = kept_rows(old, self.tree_of_slot, plan.inst, tree_of_slot, self.slot_base, down)
            if not self.atomic:
                for sw, rows in keep.items():
                    runs = reads.get(sw, {}).get("agg_values")
                    if runs:
                        reads[sw]["agg_values"] = drop_rows(runs, rows)
                        if not reads[sw]["agg_values"]:
                            del reads[sw]["agg_values"]
                reads = {sw: want for sw, want in reads.items() if want}
                add_reads(second)
            for sw in new_switches:
                if sw not in held:                   # on the new trees only: held from here
                    hold = self.clients[sw].hold_lines(HOLD_MS)
                    second[sw] = hold + second.get(sw, [])
                    if sw in at and sw not in first:
                        at[sw] += len(hold)
                    held.add(sw)
            early_reset = self.carry.complete_ahead and not down   # else (2) may read the new tree's switches
            if early_reset:                            # everything read: reset in this batch too
                for sw in new_switches:
                    second.setdefault(sw, []).extend(self._reset_lines(sw, {"agg_values": keep.get(sw)}))
            for sw, lines in plan.lines.items():
                second.setdefault(sw, []).extend(lines)
            t2 = time.monotonic()
            pending2 = send_batches(self.clients, second)
            unread.append(pending2)
            regs, values = {}, {}

            def parse(sw: str, out: list[str]) -> None:     # while slower switches still work
                self.carry.parse_reads(self.clients[sw], reads[sw], out[at[sw]:], regs, values, sw)

            unread.remove(pending)
            outs = collect_batches(pending, {sw: parse for sw in first if sw in reads})
            unread.remove(pending2)
            outs2 = collect_batches(pending2, {sw: parse for sw in second if sw in reads and sw not in first})
            t_r1 = time.monotonic()
            associate = plan.finish({sw: outs.get(sw, []) + outs2.get(sw, []) for sw in set(outs) | set(outs2)})
            t3 = time.monotonic()
            carried = self.carry.snapshot(self.clients, old, self.tree_of_slot, regs, values, down, keep=keep,
                                          new=(plan.inst, tree_of_slot))
            t4 = time.monotonic()
            cells = self.carry.preload_cells(plan.inst, tree_of_slot, carried)
            writes = sum(c.count for c in cells)
            t_r3 = time.monotonic()

            def final(sw: str) -> list[str]:           # sent as soon as built: the first switches
                client = self.clients[sw]               # work while the others' lines are made
                return ([] if early_reset else self._reset_lines(sw, carried.kept.get(sw))) + associate.get(sw, []) \
                    + [line for c in cells for line in c.lines_for(sw, client)]

            run_built(self.clients, new_switches, final)
            t_r3e = time.monotonic()
            self.treeset, self.inst, self.tree_of_slot = new, plan.inst, tree_of_slot
            self._publish()
            t5 = time.monotonic()
        except BaseException:                     # the holds would end by themselves, later
            _drain(unread)                         # first: the sockets answer in order
            try:
                self._after_failed_reroute(new)
            finally:
                _release(self.clients, held)
            raise
        phases = {"freeze_ms": t3 - t_a, "snapshot_ms": t4 - t3, "entries_ms": t2 - t1, "preload_ms": t5 - t4,
                  "boost_ms": boost, "first_round_ms": t_r1 - t_a, "preload_build_ms": t_r3 - t4,
                  "last_round_ms": t_r3e - t_r3}     # last_round: the lines' encoding included
        tidy = tree_install.remove_groups_lines(old)       # the agents were told: not urgent
        for sw in held:                                  # the ports are read again
            tidy.setdefault(sw, []).extend(self.clients[sw].release_lines())
        try:
            run_batches(self.clients, tidy)
        except (SwitchCommandError, OSError) as exc:     # a switch died since: its own failure follows
            self.events.add("reroute_tidy_error", error=str(exc).splitlines()[0][:200])
            _release(self.clients, list(tidy))
        record.update(recompute_ms=round((t1 - t0) * 1e3, 2), install_ms=round((t5 - t1) * 1e3, 2),
                      standby=standby)
        return self._rerouted(record, new, carried, writes, phases)

    def _partitioned(self, what: str, exc: TreeError, record: dict, t: float) -> None:
        self.partitioned = str(exc)
        self._publish("partitioned", f"{what} failed and the workers are partitioned: {exc}")
        self.events.add("partitioned", **_cause_key(record), job=self.job, reason=str(exc))
        record.update(partitioned=True, recompute_ms=round((time.monotonic() - t) * 1e3, 2),
                      t_recovered=time.monotonic())
        self.record_failure(record)

    def _rerouted(self, record: dict, new, carried, writes: int, phases: dict) -> dict:
        self._failed_reroute = False
        if carried.conflicts:
            self.events.add("sparse_carry_conflict", columns=len(carried.conflicts),
                            switches=",".join(sorted({sw for *_, sw in carried.conflicts})),
                            why="workers and child switches below one switch need different rounds")
        record.update(epoch=new.epoch, preloaded_slots=carried.slots, register_writes=writes,
                      kept_in_place=carried.in_place,
                      t_recovered=time.monotonic(),       # the agents were told the new epoch
                      **{k: round(v * 1e3, 2) for k, v in phases.items()})
        self.record_failure(record)
        self.events.add("rerouted", **_cause_key(record), job=self.job, epoch=new.epoch, trees=len(new.trees),
                        recompute_ms=record["recompute_ms"], install_ms=record["install_ms"],
                        preloaded=carried.slots,
                        **{k: record[k] for k in ("freeze_ms", "snapshot_ms", "entries_ms", "preload_ms")})
        self._precompute()
        return record

    def stop(self) -> None:
        with self.locked():
            self.stopped = True
        worker = StandbyWorker.running
        if worker is not None:
            worker.cancel()
        self.standby_settled.set()                # nothing pending any more: nobody waits for it




# How long a reroute holds the switches' ports at most (SwitchClient.hold_lines): it releases
# them once done, in a few tens of ms; a reroute that dies on the way leaves them held no longer.
HOLD_MS = 500

# A reroute's phases (ms) in its failure record. Both paths: freeze, snapshot, entries, preload.
# The bulk path (_reroute_bulk) also records boost (the priority change and the switches' pids,
# part of recompute) and splits the rest by round: first_round (the freeze's batch, sent
# to the last answer), preload_build (the final batches built in Python), last_round (sent to
# the last answer).
REROUTE_PHASES = ("freeze_ms", "snapshot_ms", "entries_ms", "preload_ms", "boost_ms", "first_round_ms",
                  "preload_build_ms", "last_round_ms")


def _drain(unread: list[dict]) -> None:
    """Read (and drop) the answers of batches a failed reroute sent but never read: left in a
    switch's socket, they would be taken for the answers of the next command anyone sends it
    (a switch that died during another failure's reroute made the first collect raise)."""
    for pending in unread:
        for collect in pending.values():
            try:
                collect()
            except Exception:  # noqa: BLE001 - the reroute is failing already; the dead switch's own
                pass


def _release(clients: dict[str, SwitchClient], switches) -> None:
    """End the holds of a reroute that failed on the way (best effort: it is failing already).
    Then every one of those switches gets a fresh control connection where its client can
    (SoftSwitchClient.reconnect): a batch sent to a switch that died meanwhile raised before
    the others' answers were read, and a stale answer must not reach the next command."""
    try:
        run_batches(clients, {sw: clients[sw].release_lines() for sw in switches})
    except Exception:
        pass
    for sw in switches:
        reconnect = getattr(clients.get(sw), "reconnect", None)
        if reconnect is not None:
            try:
                reconnect()
            except Exception:  # noqa: BLE001 - a dead switch: its restart connects anew
                pass


def _cause(link: str, switch: str | None, t_detect: float) -> dict:
    """A failure record's start: the failed link, or the dead switch."""
    return {"switch": switch, "t_detect": t_detect} if switch else {"link": link, "t_detect": t_detect}


def _cause_key(record: dict) -> dict:
    return {"switch": record["switch"]} if "switch" in record else {"link": record["link"]}
