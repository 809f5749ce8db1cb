"""`agglab lab`: the Mininet CLI with aggregation commands, for failure experiments by hand.

Each command is a do_* method whose docstring is its help (type `help fail`).
Mininet's own commands keep working; `link a b down` is noticed by the controller
through netlink exactly like `fail a b`; `kill a1` / `restart a1` fail and revive a switch.
"""

from __future__ import annotations

import argparse
import os
import shlex
import signal
import threading

from mininet.cli import CLI

from agglab.cli import add_run_options
from ground.interrupts import Interrupted, arm
from ground import wire
from emulation.session import Session
from ground.runspec import RunSpec
from controller.switch_client import SwitchCommandError
from controller.topology import switches


class LabCLI(CLI):
    prompt = "agglab> "

    def __init__(self, session: Session, background: list | None = None, **kw):
        self.session = session
        self.running: threading.Thread | None = None
        self.background = [] if background is None else background   # for run_lab to stop
        CLI.__init__(self, session.net.net, **kw)

    def onecmd(self, line):
        """A switch that died under a command (its socket closed) is one line, not the lab's end."""
        try:
            return CLI.onecmd(self, line)
        except SwitchCommandError as exc:
            print(str(exc).splitlines()[0])
            return False

    # -- stop signals ----------------------------------------------------------------
    # Mininet's CLI swallows KeyboardInterrupt (at the prompt and while a host command
    # runs); agglab turns SIGTERM/SIGHUP into one too (ground/interrupts.py), so both places
    # let it through: the lab stops, and run_lab's clean-up removes everything. The one
    # exception is Mininet's own: Ctrl-C while a host command runs (`h1 ping h2`)
    # interrupts that command and the lab goes on.
    def run(self):
        for node in self.mn.values():
            while node.waiting:
                node.sendInt()
                node.waitOutput()
        if self.isatty():
            from mininet.util import quietRun

            quietRun("stty echo sane intr ^C")
        self.cmdloop()

    def waitForNode(self, node):
        try:
            CLI.waitForNode(self, node)
        except Interrupted as exc:
            if exc.signum != signal.SIGINT or self.inputFile:
                node.sendInt()
                raise
            node.sendInt()
            arm()
            self.waitForNode(node)

    # -- links -------------------------------------------------------------------
    def _link(self, line: str, status: str) -> None:
        args = line.split()
        if len(self.session.jobs) > 1:
            print("fail/recover with several jobs is not supported yet (each job would have to reroute); "
                  "open the lab with one job to fail links")
            return
        if len(args) != 2 or not self.session.g.has_edge(*args):
            print(f"usage: {'fail' if status == 'down' else 'recover'} A B   (a link of the topology, "
                  f"e.g. {' '.join(next(iter(self.session.g.edges)))})")
            return
        self.session.net.set_link(args[0], args[1], status == "up")

    def do_fail(self, line):
        """fail A B: take link A-B down (both ends). The controller sees it on netlink and, if an
        active tree uses it, recomputes and installs the trees under a new epoch."""
        self._link(line, "down")

    def do_recover(self, line):
        """recover A B: bring link A-B back; when no allreduce runs, trees are recomputed."""
        self._link(line, "up")

    # -- switches ----------------------------------------------------------------
    def _switch_arg(self, line: str, verb: str) -> str | None:
        args = line.split()
        if len(args) != 1 or args[0] not in switches(self.session.g):
            print(f"usage: {verb} SWITCH   (one of {' '.join(switches(self.session.g))})")
            return None
        return args[0]

    def do_kill(self, line):
        """kill SWITCH: kill -9 the switch's process: all its links fail at once. The controller sees
        the process exit, reroutes the active trees around it (new epoch) or, if that cuts a worker
        off, tells every agent the workers are partitioned."""
        self._on_switch(line, "kill", self.session.kill_switch, "killed")

    def do_restart(self, line):
        """restart SWITCH: start a killed switch again (empty tables), re-program its forwarding and
        drop simulator; the trees are recomputed with it (now, or before the next allreduce if one runs)."""
        self._on_switch(line, "restart", self.session.restart_switch, "restarted")

    def _on_switch(self, line, verb: str, action, done: str) -> None:
        """kill/restart: the switch named in `line`, one line for a refusal."""
        sw = self._switch_arg(line, verb)
        if sw:
            try:
                action(sw)
                print(f"{done} {sw}")
            except (ValueError, RuntimeError) as exc:
                print(str(exc).splitlines()[0])

    # -- state -------------------------------------------------------------------
    def do_trees(self, line):
        """trees: each job's current trees, their weights and the epoch."""
        for job in self.session.jobs:
            self._trees(job)

    def _trees(self, job):
        st = job.state()
        ts = st.treeset
        print((f"job {job.job}: " if len(self.session.jobs) > 1 else "")
              + f"algorithm {st.algorithm}, epoch {ts.epoch}, {len(ts.trees)} tree(s), window {st.window} slots"
              + (f"  PARTITIONED: {st.partitioned}" if st.partitioned else ""))
        for t in ts.trees:
            edges = " ".join(f"{a}-{b}" for a, b in sorted(t.edges))
            print(f"  tree {t.id}: root {t.root}, weight {t.weight:.3f}, {st.tree_of_slot.count(t.id)} slots, "
                  f"height {t.height}\n    {edges}")

    def do_slots(self, line):
        """slots SWITCH [N]: aggregation state of the first N (default 8) busy slots of a switch."""
        args = line.split()
        if not args or args[0] not in switches(self.session.g):
            print("usage: slots SWITCH [N]")
            return
        if args[0] not in self.session.job.live_switches():
            print(f"switch {args[0]} is down (restart {args[0]} brings it back)")
            return
        limit = int(args[1]) if len(args) > 1 else 8
        try:
            regs = self.session.job.read_registers(args[0], ("agg_count", "agg_bitmap", "agg_exp", "agg_final"))
        except SwitchCommandError as exc:
            print(str(exc).splitlines()[0])
            return
        shown = 0
        for r, count in enumerate(regs["agg_count"]):
            if count and shown < limit:
                ver, slot = divmod(r, wire.SLOTS)
                owner = self._owner(slot)
                print(f"  slot {slot:4d} ver {ver}: count {count}, bitmap {regs['agg_bitmap'][r]:#x}, "
                      f"exp {regs['agg_exp'][r]}, final {regs['agg_final'][r]}"
                      + (f"  (job {owner.job}, its slot {slot - owner.slot_base})" if owner else ""))
                shown += 1
        print(f"  ({sum(1 for c in regs['agg_count'] if c)} slot-versions in use)")

    def _owner(self, slot: int):
        """The job whose slot range holds `slot` (None with one job)."""
        if len(self.session.jobs) < 2:
            return None
        return next((j for j in self.session.jobs if j.slot_base <= slot < j.slot_base + j.slots), None)

    def do_stats(self, line):
        """stats: per switch aggregation counters (contributions, completions, duplicates, drops;
        rejected packets by reason: malformed, length, no_entry, slot, worker, from_parent, entry)."""
        for sw, stats in self.session.job.switch_stats().items():
            print(f"  {sw}: " + ", ".join(f"{k} {v}" for k, v in stats.items() if v or not k.startswith("rejected_")))

    def do_jobs(self, line):
        """jobs: every job (tenant) on the network: id, worker hosts, slot range, window, trees and
        epoch, loss on its links, slot-versions it holds per switch now, and its last allreduce."""
        last = {j["job"]: j for j in (self.session.last_result or {}).get("jobs", [])}
        spec = self.session.spec
        for index, job in enumerate(self.session.jobs):
            st = job.state()
            base, count = getattr(job, "slot_base", 0), getattr(job, "slots", wire.SLOTS)
            loss = last[job.job]["loss"] if job.job in last else spec.loss_of(index)    # as last run
            print(f"job {job.job}: {len(job.workers)} workers {','.join(job.workers)}; slots {base}..{base + count - 1}, "
                  f"window {st.window}; {len(st.treeset.trees)} tree(s) at epoch {st.treeset.epoch}; loss {loss}")
            held = []
            for sw in switches(self.session.g):
                c = job.read_registers(sw, ("agg_count",))["agg_count"]
                n = sum(1 for ver in (0, 1) for r in range(ver * wire.SLOTS + base, ver * wire.SLOTS + base + count)
                        if c[r])
                if n:
                    held.append(f"{sw} {n}")
            print("  slot-versions held: " + (", ".join(held) or "none"))
            if job.job in last:
                j = last[job.job]
                print(f"  last allreduce: {'exact' if j['exact'] else 'NOT EXACT'} in {j['seconds']} s, "
                      f"{j['packets']} packets, {j['retransmissions']} retransmissions")

    def do_events(self, line):
        """events [N]: the controller's timestamped log (link down seen, trees recomputed, installed)."""
        for entry in self.session.events.lines(int(line) if line.strip().isdigit() else None):
            print("  " + entry)

    # -- traffic -----------------------------------------------------------------
    def do_allreduce(self, line):
        """allreduce [ELEMENTS] [--tree TREE] [--dtype int32|float32] [--loss P]
        [--algorithm SCHEME] [--density D] [--fail A-B@F] [--fail-switch NAME@F] ... (any `agglab allreduce`
        option that does not reshape the network): run one allreduce in the background (fail
        links meanwhile); prints the outcome when done."""
        if self.running and self.running.is_alive():
            print("an allreduce is already running")
            return
        try:
            opts = _parse_allreduce(shlex.split(line))
            self.session.spec.with_(**opts)        # validated before any tree changes
        except ValueError as exc:
            print(exc)
            return
        tree = opts.pop("tree", None)
        if tree and tree != self.session.job.state().algorithm:
            try:
                for job in self.session.jobs:
                    job.reinstall(tree, why="requested by allreduce --tree")
            except ValueError as exc:
                print(exc)
                return
            opts["tree"] = tree

        def work():
            try:
                r = self.session.allreduce(**opts)
                if self.session.cancelled.is_set():      # the lab is stopping: say nothing
                    return
                verdict = "exact" if r["exact"] else "NOT EXACT"
                jobs = r.get("jobs", [])
                print(f"\nallreduce: {verdict}, {r['elements']} {r['dtype']} x {r['workers']} workers"
                      + (f" x {len(jobs)} jobs" if len(jobs) > 1 else "") + f" in "
                      f"{r['seconds']} s, {r['retransmissions']} retransmissions, epoch {r['epoch']}"
                      + (f", switches down: {' '.join(r['switches_down'])}" if r.get("switches_down") else "")
                      + "".join(f"\n  job {j['job']}: {'exact' if j['exact'] else 'NOT EXACT'} in {j['seconds']} s, "
                                f"{j['retransmissions']} retransmissions" for j in jobs if len(jobs) > 1)
                      + ("".join(f"\n  {e.splitlines()[0]}" for e in r.get("errors", []))))
            except Exception as exc:
                if not self.session.cancelled.is_set():
                    print(f"\nallreduce failed: {exc}")

        self.running = threading.Thread(target=work, daemon=True)
        self.background.append(self.running)
        self.running.start()
        print("allreduce started in the background")


    def do_wait(self, line):
        """wait: block until the background allreduce has finished (for scripted labs)."""
        if self.running:
            self.running.join()



# RunSpec fields one allreduce of an open lab may change; the rest shape the network.
PER_RUN = ("elements", "dtype", "loss", "tree", "algorithm", "density", "pattern", "block_size",
           "zero_workers", "seed", "window", "give_up", "fail", "fail_switch", "job_loss")


class _Options(argparse.ArgumentParser):
    """The CLI's run options (agglab.cli.add_run_options), raising instead of exiting."""

    def error(self, message):
        raise ValueError(f"allreduce: {message}; see 'help allreduce'")


def _parse_allreduce(args: list[str]) -> dict:
    """The RunSpec fields a lab `allreduce` line changes (ELEMENTS may come first, bare)."""
    ap = _Options(prog="allreduce", add_help=False)
    ap.add_argument("count", nargs="?", type=int, metavar="ELEMENTS")
    add_run_options(ap)
    ap.set_defaults(**{k: None for k in vars(ap.parse_args([]))})
    opts = {k: v for k, v in vars(ap.parse_args(args)).items() if v is not None}
    if "count" in opts:
        opts["elements"] = opts.pop("count")
    fixed = sorted(set(opts) - set(PER_RUN))
    if fixed:
        raise ValueError(f"--{fixed[0].replace('_', '-')} is fixed when the lab opens; an allreduce may change "
                         + ", ".join("--" + f.replace("_", "-") for f in PER_RUN))
    return opts


def run_lab(spec, script: str | None = None) -> int:
    """Open the lab on `spec` (a RunSpec or the CLI's CheckedRun); with `script` (a file of
    commands) run them and return at its end."""
    with Session(spec, quiet=False) as session:
        background: list[threading.Thread] = []
        print("agglab lab: type 'help' for commands; 'fail A B', 'kill S', 'allreduce', 'trees', 'events'; 'exit' to quit")
        try:
            if script:                      # Mininet polls stdin even in batch mode: give it a real file
                with open(os.devnull) as quiet_stdin:
                    LabCLI(session, background, stdin=quiet_stdin, script=script)
            else:
                LabCLI(session, background)
        finally:                            # exit, end of script, or a stop signal
            session.cancel()
            for thread in background:
                thread.join(timeout=15)
    return 0
