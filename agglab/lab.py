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
import sys
import threading

from mininet.cli import CLI
from mininet.log import setLogLevel
from mininet.util import quietRun

from agglab.actions import Actions, progress, summary
from agglab.event_words import event_line
from agglab.lab_console import PageConsole, take_turn, terminal
from agglab.run_options import add_run_options
from agglab.controller import drawing
from agglab.ground.interrupts import Interrupted, arm
from agglab.ground import wire
from agglab.emulation.session import Session
from agglab.controller.switch_client import SwitchCommandError
from agglab.controller.topology import switches


class LabCLI(CLI):
    prompt = "agglab> "
    lock = threading.RLock()        # one command at a time, the terminal's or the page's (lab_console.py)

    def __init__(self, session: Session, background: list | None = None, actions: Actions | None = None, **kw):
        self.session = session
        self.actions = actions or Actions(session, say=say)
        self.background = [] if background is None else background   # for run_lab to stop
        CLI.__init__(self, session.net.net, **kw)

    def onecmd(self, line):
        """A switch that died under a command (its socket closed), or a command that failed on
        what it was given, is one line, not the lab's end (a stop signal still ends it)."""
        with take_turn(self.lock):
            try:
                return CLI.onecmd(self, line)
            except SwitchCommandError as exc:
                print(str(exc).splitlines()[0])
            except Exception as exc:       # noqa: BLE001 - the lab goes on; the person reads one line
                print(f"{line.split()[0] if line.split() else 'command'} failed: "
                      f"{str(exc).splitlines()[0] if str(exc) else type(exc).__name__}")
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
            quietRun("stty echo sane intr ^C")
        while True:
            try:
                self.cmdloop()
                return
            except Interrupted as exc:
                # Ctrl-C while an allreduce runs stops that allreduce only (its outcome line says
                # "cancelled"); at the prompt it asks before it ends the lab (Mininet's CLI goes
                # on); SIGTERM/SIGHUP, or a script, stop the lab and run_lab cleans everything up
                if exc.signum != signal.SIGINT or self.inputFile:
                    raise
                arm()
                if self.actions.running:
                    print()
                    self._say_if(self.actions.cancel())
                elif self.confirm_end():
                    raise

    def confirm_end(self) -> bool:
        """Ctrl-C at the prompt: end the lab only if the person says so (another Ctrl-C, or
        end of input, also ends it)."""
        print("\nCtrl-C: end the lab? The network, its failed links and switches go with it. [y/N] ",
              end="", flush=True)
        try:
            answer = self.stdin.readline()
        except KeyboardInterrupt:
            print()
            return True
        if not answer:
            print()
            return True
        if answer.strip().lower() in ("y", "yes"):
            return True
        print("the lab goes on ('exit' ends it)")
        return False

    @staticmethod
    def _say_if(line: str) -> None:
        """Print what an action returned, if anything (a cancel's outcome was already said)."""
        if line:
            print(line)

    def preloop(self):
        AT_PROMPT.set()

    def precmd(self, line):
        AT_PROMPT.clear()                  # a command's own output follows: no prompt redrawn
        self.actions.note_trees()          # `show` says what changed since the epoch before
        return CLI.precmd(self, line)

    def postcmd(self, stop, line):
        if not stop:
            AT_PROMPT.set()
        return CLI.postcmd(self, stop, line)

    def emptyline(self):
        """An empty line does nothing (Mininet's repeats nothing either; cmd's would repeat)."""

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
        if len(args) != 2:
            print(f"usage: {'fail' if status == 'down' else 'recover'} A B   (a link of the topology, "
                  f"e.g. {' '.join(next(iter(self.session.g.edges)))})")
            return
        try:
            print(self.actions.link(args[0], args[1], status == "up"))
        except ValueError as exc:
            print(exc)

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
                print(self.actions.switch(sw, up=verb == "restart"))
            except ValueError as exc:
                print(exc)

    # -- state -------------------------------------------------------------------
    def do_trees(self, line):
        """trees: each job's current trees, their weights and the epoch."""
        for job in self.session.jobs:
            self._trees(job)

    def _trees(self, job):
        st = job.state()
        ts = st.treeset
        print((f"job {job.job}: " if len(self.session.jobs) > 1 else "")
              + (f"tree {st.tree}" if st.tree else "IP routes") + f", algorithm {st.algorithm}, epoch {ts.epoch}, "
              + f"{len(ts.trees)} tree(s), window {st.window} slots"
              + (f"  PARTITIONED: {st.partitioned}" if st.partitioned else ""))
        for t in ts.trees:
            edges = " ".join(f"{a}-{b}" for a, b in sorted(t.edges))
            print(f"  tree {t.id}: root {t.root}, weight {t.weight:.3f}, {st.tree_of_slot.count(t.id)} slots, "
                  f"height {t.height}\n    {edges}")

    def do_slots(self, line):
        """slots SWITCH [N]: aggregation state of the first N (default 8) busy slots of a switch."""
        args = line.split()
        if not 1 <= len(args) <= 2 or args[0] not in switches(self.session.g) or \
                (len(args) == 2 and not args[1].isdecimal()):
            print("usage: slots SWITCH [N]   (N: how many busy slots to show, default 8)")
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
        if shown:
            print(SLOTS_LEGEND)

    def _owner(self, slot: int):
        """The job whose slot range holds `slot` (None with one job)."""
        if len(self.session.jobs) < 2:
            return None
        return next((j for j in self.session.jobs if j.slot_base <= slot < j.slot_base + j.slots), None)

    def do_stats(self, line):
        """stats [session]: per switch aggregation counters of the last (or running) allreduce, in
        an aligned table, each counter explained below it; `stats session`: since the lab opened."""
        now = self.session.job.switch_stats()
        whole = line.strip() == "session" or not self.actions.run.started
        before = {} if whole else self.actions.run.counters
        rows = {}
        for sw, counters in now.items():
            old = before.get(sw, {})
            # a switch restarted since counts from 0 again: its counter is below the old one
            rows[sw] = {k: v - old.get(k, 0) if v >= old.get(k, 0) else v for k, v in counters.items()}
        print(stats_table(rows, "since the lab opened" if whole else "of the last allreduce"))
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
            if self.actions.run.cancelled:
                print("  last allreduce: cancelled (its workers were stopped before the end)")
            elif job.job in last:
                print("  last allreduce: " + last_allreduce(last[job.job]))

    def do_events(self, line):
        """events [-v] [N]: the controller's timestamped log, one line per event in words (link
        down seen, trees recomputed, installed); -v adds each event's raw fields under it."""
        args = line.split()
        verbose = "-v" in args or "--verbose" in args
        count = next((int(a) for a in args if a.isdigit()), None)
        entries = self.session.events.lines(count, fmt=lambda t0, t, kind, info: event_line(t0, t, kind, info, verbose))
        for entry in entries:
            print("  " + entry)
        if not entries:
            print("  no events yet")

    # -- traffic -----------------------------------------------------------------
    def do_allreduce(self, line):
        """allreduce [ELEMENTS] [--tree TREE] [--dtype int32|float32] [--loss P]
        [--algorithm SCHEME] [--density D] [--fail A-B@F] [--fail-switch NAME@F] ... (any `agglab allreduce`
        option that does not reshape the network): run one allreduce in the background (fail
        links meanwhile); prints the outcome when done. `progress` shows how far it is, `wait`
        waits for it, Ctrl-C or `cancel` stops it (the network stays as it is)."""
        try:
            print(self.actions.allreduce(_parse_allreduce(shlex.split(line)), summary))
        except ValueError as exc:
            print(exc)
            return
        self.background.append(self.actions.thread)

    def do_wait(self, line):
        """wait: block until the background allreduce has finished, with a progress line
        (blocks done, %, rate, ETA); Ctrl-C stops the allreduce."""
        if not self.actions.running:
            print(progress_line(self.session, self.actions))
            return
        # not Thread.join: a join that Ctrl-C interrupts marks the thread stopped (Python 3.11)
        while self.actions.running and not self.actions.run.finished.wait(0.5):
            if sys.stdout.isatty():
                sys.stdout.write("\r\x1b[K" + progress_line(self.session, self.actions))
                sys.stdout.flush()
        if sys.stdout.isatty():
            sys.stdout.write("\r\x1b[K")

    def do_progress(self, line):
        """progress: how far the running allreduce is: blocks done of all workers, %, blocks/s, ETA."""
        print(progress_line(self.session, self.actions))

    def do_cancel(self, line):
        """cancel: stop the running allreduce (its workers are killed). The network, failed links,
        dead switches, trees and epoch stay as they are (Ctrl-C does the same while one runs)."""
        self._say_if(self.actions.cancel())

    def do_show(self, line):
        """show [FILE.svg|.png|.dot]: the trees as text (root, children, links down marked DOWN,
        what changed since the epoch before), and the drawing of the topology
        with the trees (agglab draw's) written to FILE (default agglab-trees-epochN.svg)."""
        job = self.session.job
        ts = self.actions.note_trees()
        print(drawing.as_text(self.session.g, ts, self.actions.previous_trees(ts.epoch)))
        path = line.strip() or f"agglab-trees-epoch{ts.epoch}.svg"
        try:
            drawing.write(drawing.to_dot(self.session.g, ts, workers=job.workers,
                                         title=f"{self.session.spec.topology}: {ts.tree} trees, epoch {ts.epoch}"),
                          path)
            print(f"drawing written to {path}")
        except (ValueError, OSError) as exc:
            print(str(exc).splitlines()[0])
        self.shown = ts


# What `slots` shows (the agg_* registers, docs/design/data-plane-names.md)
SLOTS_LEGEND = """  ver: which of the slot's two copies (a worker alternates them per round; the other keeps
       the last result for a worker that lost it)
  count: children whose contribution is in; bitmap: which ones (bit i = child i of this switch)
  exp: the largest exponent so far (the float32 path's scaling)
  final: 1 once the slot completed at the tree's root (an inner switch sends its partial up, 0)"""


# What each aggregation counter counts (agg_stats and agg_rejects, docs/design/)
COUNTERS = {
    "contributions": "first copies of a packet added into a slot",
    "completions": "slots that completed (all children in): the result went down (or the partial up)",
    "dup_dropped": "duplicates of a packet whose slot had not completed yet (dropped: nothing to answer)",
    "dup_answered": "duplicates after completion, answered with the stored result (a lost result)",
    "rejected": "packets dropped by the job checks; by reason in the rejected_* counters",
    "sim_dropped": "packets dropped on purpose by the loss simulator (--loss)",
    "dup_up": "duplicates at a non-root switch whose partial was sent up again (no final result yet)",
    "sp_held": "sparse packets dropped as stale, or held back: a new round on a version some child "
               "is not done with yet (its sender resends, or the root releases it)",
    "rejected_malformed": "cut short: the parser ended in an error",
    "rejected_length": "IPv4/UDP length fields disagree",
    "rejected_no_entry": "no agg_job entry: another job's id, or an OLD EPOCH (packets in flight "
                         "when a reroute froze the trees: expected after a failure)",
    "rejected_slot": "slot outside the job's slot range",
    "rejected_worker": "worker field is not the port's rank",
    "rejected_from_parent": "not a result, on the parent port",
    "rejected_entry": "the entry's child index does not fit the bitmap",
    "rejected_policed": "from a port in no job, over that port's meter (the policer)",
}


def stats_table(rows: dict[str, dict[str, int]], what: str) -> str:
    """Switches as rows, the counters any switch has non-zero (and the main ones) as aligned
    columns, a total row, then one line per shown counter saying what it counts."""
    keys = [k for k in COUNTERS if k in ("contributions", "completions") or any(r.get(k) for r in rows.values())]
    keys += sorted({k for r in rows.values() for k, v in r.items() if v and k not in keys})
    total = {k: sum(r.get(k, 0) for r in rows.values()) for k in keys}
    table = [["switch", *keys], *([sw, *(str(r.get(k, 0)) for k in keys)] for sw, r in rows.items()),
             ["total", *(str(total[k]) for k in keys)]]
    widths = [max(len(row[i]) for row in table) for i in range(len(keys) + 1)]
    lines = [f"aggregation counters {what}:"]
    lines += ["  " + "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths)))
              for row in table]
    lines += [f"  {k:<{max(map(len, keys))}}  {COUNTERS.get(k, '')}" for k in keys]
    return "\n".join(lines)


def last_allreduce(j: dict) -> str:
    """A job's last allreduce for `jobs`: how it ended (a run that never finished has no figures)."""
    if j.get("seconds") is None:
        return "did not finish" + (f": {j['errors'][0].splitlines()[0]}" if j.get("errors") else "")
    return (f"{'exact' if j['exact'] else 'NOT EXACT'} in {j['seconds']} s, {j['packets']} packets, "
            f"{j['retransmissions']} retransmissions")


def progress_line(session: Session, actions: Actions) -> str:
    """`done/total blocks (P%), R blocks/s, ETA S s` of the running allreduce."""
    if not actions.running:
        return "no allreduce is running" + (f"; the last one: {actions.run.outcome.splitlines()[0]}"
                                            if actions.run.outcome else "")
    p = progress(session, actions)
    if p.total == 0:
        return f"allreduce starting: {p.reporting}/{p.workers} workers have reported"
    eta = f"ETA {p.eta:.1f} s" if p.eta is not None else "ETA -"
    return f"{p.done}/{p.total} blocks ({p.done / p.total:.0%}), {p.rate:.0f} blocks/s, {eta}"


# set while the lab waits at its prompt (say() then redraws it under what it prints)
AT_PROMPT = threading.Event()


def say(line: str) -> None:
    """Print above the prompt without mixing into what the person is typing: clear the input
    line, print, then redraw the prompt and the half-typed line (readline's buffer); while a
    command runs (or before the prompt first shows), just print the line."""
    try:
        import readline  # lazy: readline is not on every Python

        typed = readline.get_line_buffer()
    except (ImportError, AttributeError):
        typed = ""
    out = terminal()                        # the lab's, even said during a page's command
    if out.isatty() and AT_PROMPT.is_set():
        out.write(f"\r\x1b[K{line}\n{LabCLI.prompt}{typed}")
    elif out.isatty():               # over `wait`'s progress line, not after it
        out.write(f"\r\x1b[K{line}\n")
    else:
        out.write(line + "\n")
    out.flush()


# RunSpec fields one allreduce of an open lab may change; the rest shape the network.
PER_RUN = ("elements", "dtype", "loss", "tree", "algorithm", "density", "pattern", "block_size",
           "zero_workers", "seed", "window", "give_up", "fail", "fail_switch", "job_loss")


class _Options(argparse.ArgumentParser):
    """The CLI's run options (agglab/run_options.py), raising instead of exiting."""

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


def run_lab(spec, script: str | None = None, web: dict | None = None) -> int:
    """Open the lab on `spec` (a RunSpec or the CLI's CheckedRun); with `script` (a file of
    commands) run them and return at its end; with `web` ({"host", "port"}) also serve the live
    page (agglab/web) until the lab closes."""
    session = Session(spec, quiet=False, echo=lambda line: say(f"[event] {line.strip()}"))
    session.events.words = event_line          # one line in words each, as `events` shows them
    with session:
        setLogLevel("output")               # Mininet's own commands (nodes, net, dump, ...) print
        session.quiet = True                # progress is `progress`/`wait`, not a line every 5 s
        background: list[threading.Thread] = []
        actions = Actions(session, say=say)
        server = None
        try:
            if web is not None:
                from agglab.web.server import serve     # lazy: aiohttp: loaded only with --web

                console = PageConsole(LabCLI, session, actions, background).open()   # its command line
                server = serve(session, actions, lab=True, console=console, **web)
                print(f"live page: {server.url}")
            print("agglab lab: type 'help' for commands; 'fail A B', 'kill S', 'allreduce', 'show', 'progress', "
                  "'cancel', 'events'; Mininet's ('nodes', 'net', 'h1 ping -c1 h2'); 'exit' to quit")
            if script:                      # Mininet polls stdin even in batch mode: give it a real file
                with open(os.devnull) as quiet_stdin:
                    LabCLI(session, background, actions, stdin=quiet_stdin, script=script)
            else:
                LabCLI(session, background, actions)
        finally:                            # exit, end of script, or a stop signal
            if server is not None:
                server.stop()
                server.console.close()
            session.cancel()
            for thread in background:
                thread.join(timeout=15)
            AT_PROMPT.clear()
            setLogLevel("error")
    return 0
