"""What a person may do to an open network: fail or recover a link, kill or restart a switch,
start or cancel an allreduce. The lab's commands (agglab/lab.py) and the live page's buttons
(agglab/web) both call these methods, so a click does exactly what the typed command does.

Every method returns the line to show, or raises ValueError with the one line that says why
it was refused. The background allreduce's outcome goes to `say` (the lab prints it above
its prompt; the page shows it in its event log through the session's events).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

from agglab.controller.topology import switches
from agglab.controller.trees.base import TreeError
from agglab.ground import progress as progress_file
from agglab.controller.run_check import check_override


@dataclass
class RunState:
    """The allreduce started here last: what it asked for and how it ended."""
    opts: dict = field(default_factory=dict)
    started: float = 0.0
    ended: float | None = None
    outcome: str = ""
    cancelled: bool = False
    counters: dict = field(default_factory=dict)     # switch -> agg counters when it started
    finished: threading.Event = field(default_factory=threading.Event)


class Actions:
    def __init__(self, session, say=print):
        self.session = session
        self.say = say
        self.thread: threading.Thread | None = None
        self.run = RunState()
        self.changed: dict[frozenset, float] = {}       # link -> when it was last set down/up here
        self.down: set[frozenset] = set()               # links set down here (the controller's view lags)
        self._cancelling = threading.Event()
        self._external = False            # an allreduce the caller runs itself (agglab allreduce --web)
        self.history: dict[int, object] = {}   # epoch -> the first job's trees, as seen (the lab's `show`)
        self.note_trees()

    def note_trees(self):
        """Remember the first job's trees under their epoch; returns them."""
        ts = self.session.job.trees() if self.session.job else None
        if ts is not None:
            self.history.setdefault(ts.epoch, ts)
        return ts

    def previous_trees(self, epoch: int):
        """The trees of the last epoch seen before `epoch` (None if none was)."""
        older = [e for e in self.history if e < epoch]
        return self.history[max(older)] if older else None

    # -- links and switches -------------------------------------------------------------
    def link(self, a: str, b: str, up: bool) -> str:
        """Take link a-b down (both ends) or bring it back; the controller learns it on netlink
        and every job whose trees use it reroutes (controller/job_group.py)."""
        if not self.session.g.has_edge(a, b):
            raise ValueError(f"no link {a}-{b} (e.g. {' '.join(next(iter(self.session.g.edges)))})")
        key = frozenset((a, b))
        # already so, as set here and as the controller sees it: say it rather than print nothing
        # (either view alone may lag: netlink, or Mininet's own `link a b up|down`)
        here_down, seen_down = key in self.down, self.session.g.edges[a, b].get("up", True) is False
        if (up and not here_down and not seen_down) or (not up and here_down and seen_down):
            return f"link {a}-{b} is already {'up' if up else 'down'}: nothing to do"
        self.changed[key] = self.session.net.set_link(a, b, up)
        (self.down.discard if up else self.down.add)(key)
        return f"link {a}-{b} {'up' if up else 'down'}"

    def switch(self, name: str, up: bool) -> str:
        """Restart (up) or kill -9 (down) a switch's process."""
        if name not in switches(self.session.g):
            raise ValueError(f"no switch {name!r} (one of {' '.join(switches(self.session.g))})")
        try:
            if up:
                self.session.restart_switch(name)
            else:
                self.session.kill_switch(name)
        except (ValueError, RuntimeError) as exc:
            raise ValueError(str(exc).splitlines()[0]) from None
        return f"{'restarted' if up else 'killed'} {name}"

    # -- allreduce --------------------------------------------------------------------
    @property
    def running(self) -> bool:
        """An allreduce runs. Why not Thread.is_alive: a join that Ctrl-C interrupted leaves the
        thread marked stopped while it runs on (Python 3.11's threading, bpo-45274's fix)."""
        return self._external or (self.thread is not None and not self.run.finished.is_set())

    def run_here(self, fn):
        """Run `fn()` (the caller's own allreduce) in this thread, shown as running meanwhile."""
        self.run = RunState(started=time.monotonic(), counters=self.session.job.switch_stats())
        self._external = True
        try:
            return fn()
        finally:
            self._external = False
            self.run.ended = time.monotonic()

    def allreduce(self, opts: dict, summarise) -> str:
        """Start one allreduce in the background with these RunSpec overrides (validated
        first); `summarise(result) -> str` words the outcome for `say`."""
        if self.running:
            raise ValueError("an allreduce is already running (cancel stops it)")
        spec = self.session.spec.with_(**opts)          # validated before any tree changes
        if opts.get("fail") or opts.get("fail_switch"):   # and the links and switches they name
            check_override(spec, self.session.g, None)
        tree = opts.pop("tree", None)
        if tree and tree != self.session.job.state().tree:
            try:
                for job in self.session.jobs:
                    job.reinstall(tree, why="requested by allreduce --tree")
            except TreeError as exc:
                raise ValueError(str(exc).splitlines()[0]) from None
            opts["tree"] = tree
        self.run = RunState(opts=dict(opts), started=time.monotonic(), counters=self.session.job.switch_stats())
        self.session.cancelled.clear()
        self._cancelling.clear()
        run = self.run

        def work():
            try:
                r = self.session.allreduce(**opts)
                run.outcome = summarise(r)
            except Exception as exc:        # noqa: BLE001 - one line for the person, not a traceback
                run.outcome = f"allreduce failed: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}"
            finally:
                run.ended = time.monotonic()
            if self._cancelling.is_set():
                run.cancelled = True
                run.outcome = "allreduce cancelled: its workers were stopped; network, failed links and epoch are as they were"
            if not (self.session.cancelled.is_set() and not self._cancelling.is_set()):   # the lab is closing: quiet
                self.say(run.outcome)
            run.finished.set()       # after the outcome is said: `wait` returns to a lab that has printed it

        self.thread = threading.Thread(target=work, daemon=True, name="lab-allreduce")
        self.thread.start()
        return "allreduce started in the background"

    def cancel(self, timeout: float = 30.0) -> str:
        """Stop the running allreduce only (its workers are killed); the network, the failed
        links, the trees and their epoch stay as they are."""
        if self._external:
            raise ValueError("this allreduce is the command's own: stop it with Ctrl-C where it runs")
        if not self.running:
            return "no allreduce is running"
        self._cancelling.set()
        self.session.cancel()
        stopped = self.run.finished.wait(timeout)
        self.session.cancelled.clear()
        return "" if stopped else "the allreduce is still stopping"


@dataclass
class Progress:
    workers: int
    reporting: int
    done: int
    total: int
    rate: float              # blocks per second since the allreduce started
    eta: float | None        # seconds left at that rate
    per_worker: list         # (done, total) or None, by rank


def progress(session, actions: Actions) -> Progress:
    """Blocks done by every worker of the allreduce running now (or last), from the progress
    files the workers rewrite as they go (ground/progress.py)."""
    workers = list(session.job.workers) if session.job else []
    run_dir = session.net.run.path / f"run{session.runs}" if session.net.run is not None else None
    per = [progress_file.read(run_dir / f"rank{r}.progress") if run_dir else None for r in range(len(workers))]
    seen = [p for p in per if p is not None]
    done, total = sum(p[0] for p in seen), sum(p[1] for p in seen)
    elapsed = max(1e-3, (actions.run.ended or time.monotonic()) - actions.run.started) if actions.run.started else 0
    rate = done / elapsed if elapsed else 0.0
    eta = (total - done) / rate if rate > 0 and len(seen) == len(workers) else None
    return Progress(len(workers), len(seen), done, total if len(seen) == len(workers) else 0, rate, eta, per)


def summary(r: dict) -> str:
    """One allreduce's outcome in words, as the lab prints it and the live page shows it."""
    verdict = "exact" if r["exact"] else "NOT EXACT"
    jobs = r.get("jobs", [])
    return (f"allreduce: {verdict}, {r['elements']} {r['dtype']} x {r['workers']} workers"
            + (f" x {len(jobs)} jobs" if len(jobs) > 1 else "") + " in "
            f"{r['seconds']} s, {r['retransmissions']} retransmissions, epoch {r['epoch']}"
            + (f", switches down: {' '.join(r['switches_down'])}" if r.get("switches_down") else "")
            + "".join(f"\n  job {j['job']}: {'exact' if j['exact'] else 'NOT EXACT'} in {j['seconds']} s, "
                      f"{j['retransmissions']} retransmissions" for j in jobs if len(jobs) > 1)
            + "".join(f"\n  {e.splitlines()[0]}" for e in r.get("errors", []))
            + (f"\n  {NO_LOSS_RETX}" if r.get("loss") == 0 and r.get("retransmissions") else ""))


# Why a run without simulated loss still retransmits (a student's first question in the lab)
NO_LOSS_RETX = ("(no packet was dropped on purpose at 0% loss: a retransmission is a slot's timer firing "
                "before its result came back - a busy CPU, a full queue, or a reroute's old epoch; the "
                "switch answers or drops the duplicates, so the sums stay exact)")
