"""The reroute in rounds of bulk batches: where every switch takes pipelined batches.

Why rounds: on switches that send a batch before reading its answers (software switches, BMv2
over Thrift: `SwitchClient.pipelined_batches`) a batch sent to every switch before any answer
is read costs the slowest switch's time, not their sum. So the reroute is a few rounds, each
one batch per switch (docs/design/reroute.md, "Fast reroute", numbers them the same way):
1. on the old trees' live switches, the hold (softswitch/daemon.py: until the reroute is done a
   switch serves its control socket alone, at once), the old epoch's agg_job deletes (the
   freeze) and the carry's register reads (the window's cells of both versions; a switch's
   state is final once its freeze ran), sent before anything else (the switches' priority, the
   new trees, their entries) is done; then, on the new trees' switches, the reset where round
   1 reads all the carry needs, and the new epoch's entries and groups (harmless: no agent uses
   the new epoch before it is told);
2. the carried results' values, where round 1 did not read them (from the holders only; inside
   the carry's snapshot);
3. the reset (if not done in 1), the carry's preload, the new groups completed;
then the epoch file, and the old groups removed and the holds released. A dense carry reads its
values in round 1 as well and resets there, so it needs only rounds 1 and 3 (on BMv2 so does
the sparse carry: its held rounds' sp_values go with the new trees' batches); with a dead switch
it reads the live roots' values in round 1 but resets in round 3, since a dead root's results
are read from the live switches below it in round 2. The trees come from the standby when it
has them. No drain where batches are atomic (software switches): once a switch answered its
freeze, no packet of the old epoch touches its state; elsewhere (BMv2) the freeze goes out
alone first, then the drain, then the reads of the per-slot registers (counts, bitmaps ...),
answered while the trees are computed; the values of the slot versions they say are held
go with the new trees' batches, as single cells: BMv2 has no range read, and a whole
agg_values read per old root (1 MB) was most of round 1 (holders.py).
"""

from __future__ import annotations

import time

from agglab.controller import tree_install
from agglab.controller.reroute.failover import kept_rows
from agglab.controller.reroute.record import cause, partitioned, rerouted
from agglab.controller.slot_partition import partition_slots, prefer_old_roots
from agglab.controller.switch_batches import collect_batches, run_batches, run_built, send_batches
from agglab.controller.switch_client import SwitchClient, SwitchCommandError
from agglab.controller.trees.base import TreeError

# How long a reroute holds the switches' ports at most (SwitchClient.hold_lines): it releases
# them once done, in a few tens of ms; a reroute that dies on the way leaves them held no longer.
HOLD_MS = 500


class BulkReroute:
    """One reroute of a TreeJob (`job`) around the failed `link` (or dead `switch`), started at
    `t0`. `raise_switches(holding)` raises the live switches' priority (controller/reroute/run.py),
    the ones in `holding` to real time. `run()` goes through the rounds in order, one method
    each; the attributes are what one round hands the next."""

    def __init__(self, job, link: str, t_detect: float, switch: str | None, t0: float, raise_switches):
        self.job, self.clients, self.carry = job, job.clients, job.carry
        self.raise_switches = raise_switches
        self.t0 = t0
        self.record = cause(link, switch, t_detect)
        self.boost = time.monotonic() - t0             # the priority change: part of the recompute
        self.what = link if switch else f"link {link}"
        self.down = job._down()
        self.old = job.inst
        # BMv2 (not atomic): round 1 reads the per-slot registers after the drain, and the values
        # of the slot versions they say are held (value_reads) with the new trees' batches
        self.reads = self.carry.first_reads(self.old, job.tree_of_slot, self.down, values=job.atomic)
        self.reads2: dict[str, dict[str, list]] = {}    # the held values, read in the new trees' batches
        self.kept: dict[str, dict[str, set]] = {}        # what the reset leaves in place, with reads2
        self.frozen = sorted({sw for sw, _ in self.old.roles} - self.down)
        self.first: dict[str, list[str]] = {}       # round 1's batches: the old trees' switches
        self.second: dict[str, list[str]] = {}      # round 1's batches: the new trees' switches
        self.at: dict[str, int] = {}                 # switch -> its first read line in its batch
        self.at2: dict[str, int] = {}                # the same, of reads2 in the new trees' batches
        self.regs, self.values = {}, {}              # what the reads found (the snapshot's regs=, values=)
        self.outs1: dict[str, list[str]] = {}        # round 1's first answers, once read
        self.held: set[str] = set()                  # switches sent a hold: released at the end
        self.unread: list[dict] = []                 # batches whose answers were not read yet
        self.clock: dict[str, float] = {}            # when each step ended (the record's phases)
        self.new = None                              # the new trees

    def run(self) -> dict:
        """The reroute, round by round; returns its failure record. A failure on the way
        (a switch that died under it) drops the answers still due, marks the job for the next
        failure event to reroute again (`_failed`) and releases the holds, then raises."""
        pending = self._send_freeze()
        try:
            if self.job.atomic:      # agents: a pause, not a stall, and no resends into the frozen epoch
                self.job._publish("rerouting", f"{self.what} failed")
            self._raise_switches()
            try:
                self._new_trees()
            except TreeError as exc:
                self.unread.remove(pending)
                collect_batches(pending)
                _release(self.clients, self.held)
                partitioned(self.job, self.what, exc, self.record, self.t0)
                return self.record
            self._plan_new_trees()
            pending2 = self._send_new_trees(pending)
            associate = self._collect_round_one(pending, pending2)
            carried = self._snapshot()
            writes = self._send_preload(carried, associate)
            self._switch_over()
        except BaseException:                     # the holds would end by themselves, later
            _drop_answers(self.unread)             # first: the sockets answer in order
            try:
                _failed(self.job, self.new)
            finally:
                _release(self.clients, self.held)
            raise
        phases = self._phases()
        self._tidy()
        c = self.clock
        self.record.update(recompute_ms=round((c["trees"] - self.t0) * 1e3, 2),
                           install_ms=round((c["published"] - c["trees"]) * 1e3, 2), standby=self.standby)
        return rerouted(self.job, self.record, self.new, carried, writes, phases)

    # -- round 1 -------------------------------------------------------------------------
    def _send_freeze(self) -> dict:
        """Round 1, the old trees: to each of their live switches the hold and the freeze,
        before anything else is done; where batches are atomic the carry's reads behind them
        in the same batch. Elsewhere (BMv2) the freeze alone, answered, then the drain
        (packets that matched before the delete still run), then the reads of the per-slot
        registers alone, answered while the new trees are computed; the held values go with
        the new trees' batches. Returns the sent batches' collectors."""
        job = self.job
        first = {sw: self.clients[sw].hold_lines(HOLD_MS) for sw in self.frozen}
        for sw, lines in tree_install.freeze_lines(self.old, self.clients).items():
            first.setdefault(sw, []).extend(lines)
        self.clock["sent"] = time.monotonic()
        if not job.atomic:                          # packets that matched before the delete
            job._publish("rerouting", f"{self.what} failed")
            run_batches(self.clients, first)
            time.sleep(job.drain)
            first = {}
        self._add_reads(first, self.reads, self.at)
        self.first = first
        self.held = set(self.frozen)
        pending = send_batches(self.clients, first)
        self.unread.append(pending)
        return pending

    def _add_reads(self, batch: dict, reads: dict, at: dict) -> None:
        """The carry's `reads` appended to each switch's batch (after its freeze: its state is
        final), where they start noted in `at` for the parse."""
        for sw, want in reads.items():
            at[sw] = len(batch.setdefault(sw, []))
            batch[sw] += self.carry.read_lines(self.clients[sw], want)

    def _raise_switches(self) -> None:
        """Once the first batches are on their way: the switches' priority (the held ones to
        real time where they hold), counted in boost_ms."""
        tb = time.monotonic()
        self.raise_switches(self.frozen if self.job.atomic else ())
        self.boost += time.monotonic() - tb

    def _new_trees(self) -> None:
        """The trees over the live links and switches, from the standby when it has them;
        raises TreeError if the workers are partitioned."""
        job = self.job
        self.standby = (job.tree, job._down_links()) in job._standby
        self.new = job._compute(job._down_links(), job._next_epoch())
        self.clock["trees"] = time.monotonic()

    def _plan_new_trees(self) -> None:
        """The new trees' entries and groups as batches (tree_install.plan), and their slots:
        a slot stays with its old root where a new tree is rooted there, so its result stays
        in place (kept_rows): unread where the reads wait for this (BMv2), unwritten."""
        job = self.job
        self.plan = tree_install.plan(job.g, self.new, job.job, slot_base=job.slot_base, reply_ports=job.reply_ports,
                                      slots=job.slots, ranks=job._ranks())
        self.new_switches = sorted({sw for sw, _ in self.plan.inst.roles})
        prefer = prefer_old_roots(self.old, self.plan.inst, job.tree_of_slot, self.down)
        self.tree_of_slot = partition_slots(self.new.weights, job.window, prefer=prefer)
        self.keep = kept_rows(self.old, job.tree_of_slot, self.plan.inst, self.tree_of_slot, job.slot_base, self.down)

    def _send_new_trees(self, pending: dict) -> dict:
        """Round 1, the new trees: where the reads waited for the drain (BMv2), the first
        reads' answers (`pending`) read, and the values of the slot versions they say are held
        (value_reads, without the kept rows: a few single cells where BMv2 read a whole
        register per old root); to each switch of the new trees a hold where it had none,
        the reset where round 1 reads all the carry needs (`early_reset`; after the reads on
        the same connection), and the new epoch's entries and groups. Returns the sent
        batches' collectors."""
        job, second = self.job, self.second
        if not job.atomic:
            self.unread.remove(pending)
            self.outs1 = self._collect(pending, self.reads, self.at)
            self.reads2, self.kept = self.carry.value_reads(self.regs, self.old, job.tree_of_slot, self.down,
                                                            self.keep, new=(self.plan.inst, self.tree_of_slot))
            self._add_reads(second, self.reads2, self.at2)
        for sw in self.new_switches:
            if sw not in self.held:                   # on the new trees only: held from here
                hold = self.clients[sw].hold_lines(HOLD_MS)
                second[sw] = hold + second.get(sw, [])
                if sw in self.at2:
                    self.at2[sw] += len(hold)
                self.held.add(sw)
        # everything read (the carry's own reads; on BMv2 value_reads above, for either carry):
        # reset in this batch too. Not with a switch down: round 2 may read the new trees' switches
        self.early_reset = (self.carry.complete_ahead or not job.atomic) and not self.down
        if self.early_reset:
            for sw in self.new_switches:
                kept = self.kept.get(sw) if not job.atomic else {"agg_values": self.keep.get(sw)}
                second.setdefault(sw, []).extend(job._reset_lines(sw, kept))
        for sw, lines in self.plan.lines.items():
            second.setdefault(sw, []).extend(lines)
        self.clock["planned"] = time.monotonic()
        pending = send_batches(self.clients, second)
        self.unread.append(pending)
        return pending

    def _collect(self, pending: dict, reads: dict, at: dict) -> dict[str, list[str]]:
        """A batch's answers, each switch's `reads` (starting at `at`) parsed into regs /
        values as they arrive (while slower switches still work)."""
        def parse(sw: str, out: list[str]) -> None:
            self.carry.parse_reads(self.clients[sw], reads[sw], out[at[sw]:], self.regs, self.values, sw)

        return collect_batches(pending, {sw: parse for sw in reads})

    def _collect_round_one(self, pending: dict, pending2: dict) -> dict[str, list[str]]:
        """Round 1's answers: the reads parsed, then the new entries' handles taken; returns
        the lines that complete the new groups (InstallPlan.finish), sent in round 3."""
        outs = self.outs1                         # BMv2: read before the new trees' batches went out
        if self.job.atomic:                       # the reads came with the freeze
            self.unread.remove(pending)
            outs = self._collect(pending, self.reads, self.at)
        self.unread.remove(pending2)
        outs2 = self._collect(pending2, self.reads2, self.at2)
        self.clock["round_one"] = time.monotonic()
        associate = self.plan.finish({sw: outs.get(sw, []) + outs2.get(sw, []) for sw in set(outs) | set(outs2)})
        self.clock["finished"] = time.monotonic()
        return associate

    # -- round 2 -------------------------------------------------------------------------
    def _snapshot(self):
        """What the old trees held, from round 1's reads; round 2 (the values round 1 did not
        read) runs inside the carry's snapshot."""
        carried = self.carry.snapshot(self.clients, self.old, self.job.tree_of_slot, self.regs, self.values, self.down,
                                      keep=self.keep, new=(self.plan.inst, self.tree_of_slot))
        self.clock["snapshot"] = time.monotonic()
        return carried

    # -- round 3 -------------------------------------------------------------------------
    def _send_preload(self, carried, associate: dict[str, list[str]]) -> int:
        """Round 3, per switch of the new trees: the reset (if not done in round 1), the
        carry's preload, the new groups completed; each switch's lines sent as soon as built,
        so the first switches work while the others' lines are made. Returns the cells written."""
        cells = self.carry.preload_cells(self.plan.inst, self.tree_of_slot, carried)
        writes = sum(c.count for c in cells)
        self.clock["cells"] = time.monotonic()

        def final(sw: str) -> list[str]:
            client = self.clients[sw]
            reset = [] if self.early_reset else self.job._reset_lines(sw, carried.kept.get(sw))
            return reset + associate.get(sw, []) + [line for c in cells for line in c.lines_for(sw, client)]

        run_built(self.clients, self.new_switches, final)
        self.clock["round_three"] = time.monotonic()
        return writes

    def _switch_over(self) -> None:
        """The job takes the new trees, and the epoch file tells the agents."""
        job = self.job
        job.treeset, job.inst, job.tree_of_slot = self.new, self.plan.inst, self.tree_of_slot
        job._publish()
        self.clock["published"] = time.monotonic()

    def _phases(self) -> dict[str, float]:
        """The record's phases (s; controller/reroute/record.REROUTE_PHASES)."""
        c = self.clock
        return {"freeze_ms": c["finished"] - c["sent"], "snapshot_ms": c["snapshot"] - c["finished"],
                "entries_ms": c["planned"] - c["trees"], "preload_ms": c["published"] - c["snapshot"],
                "boost_ms": self.boost, "first_round_ms": c["round_one"] - c["sent"],
                "preload_build_ms": c["cells"] - c["snapshot"],
                "last_round_ms": c["round_three"] - c["cells"]}     # last_round: the lines' encoding included

    def _tidy(self) -> None:
        """After the agents were told (not urgent): the old groups removed, the holds ended
        (the ports are read again)."""
        tidy = tree_install.remove_groups_lines(self.old)
        for sw in self.held:
            tidy.setdefault(sw, []).extend(self.clients[sw].release_lines())
        try:
            run_batches(self.clients, tidy)
        except (SwitchCommandError, OSError) as exc:     # a switch died since: its own failure follows
            self.job.events.add("reroute_tidy_error", error=str(exc).splitlines()[0][:200])
            _release(self.clients, list(tidy))


def _failed(job, new) -> None:
    """A reroute failed half-way (a switch it needed died under it): the old epoch is frozen
    and the new one may be partly installed. Its multicast groups are destroyed where they
    may exist, and the next trees skip to the epoch after it with the other parity: group
    ids alternate with the epoch's parity (tree_install.tree_group), so that epoch's ids
    are neither the installed trees' nor any left of the failed ones, and its agg_job keys
    are new (TreeJob._next_epoch). The next failure event (usually the death that made this
    one fail) reroutes whatever it hits (TreeJob._failed_reroute), and so does the next link
    or switch change."""
    job._failed_reroute = True
    if new is not None:
        groups = [tree_install.tree_group(job.job, t.id, new.epoch) for t in new.trees]
        for sw in job.live_switches():
            for g in groups:
                try:
                    job.clients[sw].commands([f"mc_mgrp_destroy {g}"])
                except Exception:  # noqa: BLE001 - not created there, or the switch is dead too
                    pass
        job._spent_epoch = max(job._spent_epoch, new.epoch + 1)


def _drop_answers(unread: list[dict]) -> None:
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
