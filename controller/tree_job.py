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

import threading
import time
from pathlib import Path
from typing import Callable

import networkx as nx

from agglab.ground import wire
from agglab.ground.epoch_file import publish as publish_epoch
from agglab.ground.schemes import DEFAULT as DEFAULT_SCHEME
from agglab.controller import tree_install, trees
from agglab.controller.reroute import Carry, reset_lines
from agglab.controller.reroute.run import run_reroute
from agglab.controller.events import EventLog
from agglab.controller.job_protocol import Job
from agglab.controller.slot_partition import partition_slots
from agglab.controller.standby import StandbyWorker
from agglab.controller.switch_client import SwitchClient, SwitchCommandError
from agglab.controller.topology import switches
from agglab.controller.trees.base import TreeError


class TreeJob(Job):
    """A job aggregating along switch trees (spt, rat, packing) that reroutes live."""

    def __init__(self, graph: nx.Graph, clients: dict[str, SwitchClient], tree: str,
                 workers: list[str], window: int, epoch_file: Path, *,
                 carry_for: Callable[[str, int], Carry], algorithm: str = DEFAULT_SCHEME, job: int = 0,
                 events: EventLog | None = None, drain: float | None = None, standby: bool = True,
                 slot_base: int = 0, slots: int | None = None, reply_ports: dict | None = None):
        """`tree`: the tree algorithm (controller/trees/NAME.py). `carry_for(algorithm, slot_base)`:
        the reroute carry of a scheme (controller/schemes carry_for, given by the scheme's
        installer): the job asks it per allreduce, since an allreduce may run another scheme
        than the one it was installed for, and the reroute below knows no scheme by name.
        `algorithm`: the scheme of its allreduces until prepare() says another.
        `drain`: seconds a reroute waits after the freeze for packets in flight (default:
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
        self.tree = tree
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
        self._standby: dict = {}            # (tree, frozenset of down links) -> TreeSet | TreeError
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
        self.carry_for = carry_for
        self.carry = carry_for(algorithm, slot_base)   # what a reroute keeps: set per allreduce by prepare()
        self.stopped = False
        self.pending_reinstall: str | None = None   # a switch came back during an allreduce
        self._spent_epoch = 0          # the last epoch a failed reroute may have left entries of
        self._failed_reroute = False   # the last reroute failed half-way (reroute/bulk.py): the next failure reroutes

    # -- install ---------------------------------------------------------------------
    def start(self) -> "TreeJob":
        t0 = time.monotonic()
        self.treeset = trees.compute(self.tree, self.g, self.workers, epoch=0)
        recompute = time.monotonic() - t0
        self.tree_of_slot = partition_slots(self.treeset.weights, self.window)
        self._reset(self.live_switches())
        self.inst = self._install(self.treeset)
        self._publish()
        self.events.add("trees_installed", epoch=0, trees=len(self.treeset.trees), tree=self.tree,
                        compute_ms=round(recompute * 1e3, 2), install_ms=round(self.inst.seconds * 1e3, 2),
                        entries=self.inst.entries)
        self._precompute()
        return self

    def reinstall(self, tree: str | None = None, why: str = "") -> None:
        """Between allreduces: recompute (maybe with another tree algorithm) under a new epoch."""
        with self.locked():
            if tree:
                self.tree = tree
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
            self.events.add("trees_installed", epoch=new.epoch, trees=len(new.trees), tree=self.tree,
                            why=why, compute_ms=round((t1 - t0) * 1e3, 2),
                            install_ms=round((time.monotonic() - t1) * 1e3, 2))
            self._precompute()

    def prepare(self, window: int, algorithm: str = DEFAULT_SCHEME) -> None:
        """Before each allreduce: fresh registers, slots partitioned for this window, the
        reroute carry of the allreduce's scheme `algorithm` (controller/reroute/carry.py)."""
        with self.locked():
            if self.pending_reinstall:         # a restarted switch rejoins before the next run
                why, self.pending_reinstall = self.pending_reinstall, None
                self.partitioned = None
                self.reinstall(why=why)
            self.window = window
            self.algorithm = algorithm
            self.carry = self.carry_for(algorithm, self.slot_base)
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

    def _next_epoch(self) -> int:
        """The epoch new trees go under: past the installed one and past any a failed reroute
        may have left entries of (its round 1 installs the new epoch's entries before it knows
        it will finish), which would otherwise collide (DUPLICATE_ENTRY) with the next install."""
        return max(self.treeset.epoch, self._spent_epoch) + 1

    def _compute(self, down: frozenset, epoch: int):
        """The trees with links `down` failed: precomputed if the standby has them, else now.
        Raises TreeError (partition) either way."""
        got = self._standby.get((self.tree, down))
        if got is None:
            got = trees.compute(self.tree, self.g, self.workers, epoch=epoch)
            self._standby[self.tree, down] = got
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
                if (key := (self.tree, down | {frozenset((u, v))})) not in self._standby]
        worker = StandbyWorker.get()                  # key: as _down_links() after u-v fails
        if todo and worker is not None:
            self.standby_settled.clear()
            worker.submit(self.tree, self.g.copy(), self.workers, todo, self._standby_store(len(todo)))

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
                self.events.add("standby_ready", tree=key[0], failures=count,
                                ms=round((time.monotonic() - started) * 1e3, 1))
                self.standby_settled.set()
        return store

    # -- reroute -----------------------------------------------------------------------
    def reroute(self, link: str, t_detect: float, switch: str | None = None) -> dict:
        """Freeze the old epoch, snapshot what it holds (from live switches), install the
        trees recomputed over live links and switches, preload, tell the agents. `link` names
        the cause ("a1-c1", or "switch a1" with `switch` set). The reroute is
        controller/reroute/ (run.py: its priority; bulk.py: the rounds where batches pipeline,
        steps.py: one step after the other elsewhere); it works on this job's state through
        the helpers above. Returns the failure record."""
        return run_reroute(self, link, t_detect, switch)

    def stop(self) -> None:
        with self.locked():
            self.stopped = True
        worker = StandbyWorker.running
        if worker is not None:
            worker.cancel()
        self.standby_settled.set()                # nothing pending any more: nobody waits for it
