"""A seeded fault schedule during an allreduce (Jepsen's nemesis): `agglab allreduce --chaos SEED`.

Why: each failure path (a link down, a killed switch, a hung one, loss) is tested on its
own with a scripted moment; what breaks in practice is their overlap: a flap during a
reroute, a restart while another switch is dead, a loss burst on a link a reroute just
moved onto. The schedule draws FAULTS faults from Random(SEED): kind, target and the
progress share of the slowest worker at which it strikes (as --fail does), and how long it
lasts before it is undone:

- link_flap: a switch-switch link goes down, and up again after `hold_ms` (taken down as
  `--fail` takes one: its ends' shells raised until the job has seen it);
- switch_kill: a switch is killed (kill -9) and restarted after `hold_ms`;
- switch_hang: a switch is stopped (SIGSTOP); the liveness probe declares it hung and
  fences it, and it is restarted after `hold_ms` (at least the probe's bound);
- loss_burst: a switch-switch link drops `loss` of its frames both ways for `hold_ms`.

Targets are drawn from the topology, not from the trees (a fault off the trees must change
nothing); kills and hangs prefer switches that are no worker's only edge switch (4 in 5), so
that most faults ask for a reroute and some for a partition. A fault whose target is already
down when its moment comes is skipped (and listed).

Why everything but the strike is done before the start gate, as for `--fail tree@F`
(emulation/failures.py; docs/measurements.md, 2026-12-07 eighth session, where choosing after
the trigger let a 1.3 s allreduce end first): the schedule, targets included, is drawn when
the run is set up (Session._chaos), the injector starts before the gate
(emulation/workers.py `scripted`), and the workers write the progress update that reaches a
fault's fraction at once (`marks`, in the run's plan). Nothing is chosen again after a
reroute: a target is a topology link or switch, whatever the trees; at the strike only
whether it is still up is read (the network's own state, no search). Every job must end exact or with a clean
partition error. When the allreduce ends, whatever is still undone is undone at once, so the
network is whole again for the next run; the JSON lists each fault with its times (from the
FailureInjector's rows: detect, per job the reroute and `recovered_ms`) and `left` says what
is still down afterwards (nothing, when all went well).
"""

from __future__ import annotations

import random
import threading
import time
from dataclasses import asdict, dataclass

from agglab.controller import drop_sim
from agglab.controller.switch_client import SwitchCommandError
from agglab.controller.topology import natural_key, switches
from agglab.emulation.failures import FailureInjector, read_progress
from agglab.ground.runspec import only_edge_switches

KINDS = ("link_flap", "switch_kill", "switch_hang", "loss_burst")
FAULTS = 4
HANG_HOLD_MS = 1500          # > the liveness probe's bound plus interval: fenced before it comes back


@dataclass(frozen=True)
class Fault:
    kind: str
    at: float                  # progress share of the slowest worker
    target: str                # "a-b" (a link) or a switch name
    hold_ms: int               # until it is undone
    loss: float = 0.0          # loss_burst only

    def link(self) -> tuple[str, str]:
        a, b = self.target.split("-")
        return a, b


def draw(seed: int, g, count: int = FAULTS, kinds: tuple[str, ...] = KINDS) -> list[Fault]:
    """The schedule for `seed` on graph `g` (deterministic; sorted by moment)."""
    rng = random.Random(seed)
    links = sorted((tuple(sorted((u, v), key=natural_key)) for u, v in g.edges
                    if g.nodes[u]["kind"] == g.nodes[v]["kind"] == "switch"), key=lambda e: (natural_key(e[0]),
                                                                                               natural_key(e[1])))
    sws = switches(g)
    edge_only = only_edge_switches(g)
    inner = [s for s in sws if s not in edge_only] or sws
    faults = []
    for _ in range(count):
        kind = rng.choice([k for k in kinds if links or k in ("switch_kill", "switch_hang")])
        at = round(rng.uniform(0.05, 0.8), 3)
        if kind in ("link_flap", "loss_burst"):
            a, b = rng.choice(links)
            hold = rng.randint(30, 400)
            loss = round(rng.uniform(0.02, 0.2), 3) if kind == "loss_burst" else 0.0
            faults.append(Fault(kind, at, f"{a}-{b}", hold, loss))
        else:
            sw = rng.choice(inner if rng.random() < 0.8 else sws)
            hold = rng.randint(100, 600) + (HANG_HOLD_MS if kind == "switch_hang" else 0)
            faults.append(Fault(kind, at, sw, hold))
    return sorted(faults, key=lambda f: f.at)


class Chaos(FailureInjector):
    """Runs a drawn schedule against a Session's network and jobs (its JobGroup)."""

    def __init__(self, session, faults: list[Fault], progress_files, seed: int):
        FailureInjector.__init__(self, session.net, session.group, [], progress_files, seed)
        self.name = "chaos"
        self.session, self.faults, self.chaos_seed = session, faults, seed
        self.marks = tuple(sorted({f.at for f in faults}))       # the progress fractions it strikes at
        self.undo: list[tuple[float, Fault, dict]] = []      # (monotonic due, fault, its row)
        self.rows: list[dict] = []                            # per fault, in schedule order
        self.lock = threading.Lock()
        self.done = threading.Event()

    # -- the schedule ------------------------------------------------------------------
    def run(self) -> None:
        try:
            for fault in self.faults:
                while (done := read_progress(self.progress_files)) < fault.at:
                    if self._undo_due() or self.stop_event.wait(0.005):
                        if self.stop_event.is_set():
                            return
                # the reading that struck: a second one can meet a progress file mid-rewrite and
                # read 0 (FailureInjector had it at 128 workers: `at` 0.0 for a fault at 0.5)
                self._strike(fault, round(done, 3))
            while self.undo and not self.stop_event.wait(0.005):
                self._undo_due()
        finally:
            self._undo_due(everything=True)       # the run is over: the network whole again
            self.done.set()

    def stop(self) -> None:
        """End the schedule and undo what is still undone (waits for it)."""
        self.stop_event.set()
        if self.is_alive():
            self.done.wait(60)

    def _strike(self, fault: Fault, at: float) -> None:
        row = {"kind": fault.kind, "target": fault.target, "at": at, "planned_at": fault.at,
               "hold_ms": fault.hold_ms, **({"loss": fault.loss} if fault.kind == "loss_burst" else {})}
        self.rows.append(row)
        net, g = self.net, self.session.g
        try:
            if fault.kind in ("link_flap", "loss_burst"):
                a, b = fault.link()
                if any(n in net.dead for n in (a, b)) or g.edges[a, b].get("up", True) is False:
                    row["skipped"] = "its link or a switch of it is down"
                    return
                if fault.kind == "link_flap":
                    t = self._link_down(a, b)       # raised, as a `--fail` (FailureInjector)
                    self.injected.append({"link": f"{a}-{b}", "t_fail": t, "at": at, "row": row})
                else:
                    t = time.monotonic()
                    self._loss(a, b, fault.loss)
            else:
                sw = fault.target
                if sw in net.dead or sw not in self.session.group.live_switches():
                    row["skipped"] = "the switch is down"
                    return
                t = net.hang_switch(sw) if fault.kind == "switch_hang" else net.kill_switch(sw)
                self.injected.append({"switch": sw, "t_fail": t, "at": at, "row": row,
                                      **({"hung": True} if fault.kind == "switch_hang" else {})})
        except (ValueError, RuntimeError, OSError) as exc:
            row["skipped"] = str(exc).splitlines()[0][:200]
            return
        row["t_fail"] = t
        with self.lock:
            self.undo.append((t + fault.hold_ms / 1e3, fault, row))

    def _undo_due(self, everything: bool = False) -> bool:
        """Undo the faults whose time has come (all of them with `everything`); True if any."""
        now = time.monotonic()
        with self.lock:
            due = [u for u in self.undo if everything or u[0] <= now]
            self.undo = [u for u in self.undo if u not in due]
        for _, fault, row in sorted(due, key=lambda u: u[0]):
            try:
                self._restore(fault)
                row["restored_ms"] = round((time.monotonic() - row["t_fail"]) * 1e3, 1)
            except Exception as exc:  # noqa: BLE001 - reported: the run's JSON says what stayed broken
                row["restore_error"] = str(exc).splitlines()[0][:200]
        return bool(due)

    def _restore(self, fault: Fault) -> None:
        net = self.net
        if fault.kind == "link_flap":
            net.set_link(*fault.link(), True)
        elif fault.kind == "loss_burst":
            self._loss(*fault.link(), None)
        else:
            sw = fault.target
            # a hung switch is fenced by the probe (killed) before it comes back, a killed one
            # seen dead by the watcher; one that never shows up dead was restarted already (the
            # same switch drawn twice: the other fault's undo brought it back)
            end = time.monotonic() + (5 if fault.kind == "switch_hang" else 2)
            while sw not in net.dead and time.monotonic() < end:
                time.sleep(0.01)
            if sw in net.dead:
                self.session.restart_switch(sw)

    def _loss(self, a: str, b: str, p: float | None) -> None:
        """Link a-b's drop simulators at `p` both ways, or (None) back to the session's."""
        group, g = self.session.group, self.session.g
        with group.locked():
            for sw, other in ((a, b), (b, a)):
                if sw in self.net.dead:
                    continue
                losses = dict(self.session.loss_table(sw))
                if p is not None:
                    losses[g.edges[sw, other]["ports"][sw]] = p
                try:
                    self.net.client(sw).commands(drop_sim.loss_lines(losses))
                except (SwitchCommandError, OSError):
                    if p is not None:
                        raise
                    # died since the burst began: its restart programs the session's losses anyway

    # -- the report --------------------------------------------------------------------
    def report(self) -> list[dict]:
        """Per fault in schedule order: what it was, when it struck and was undone, and the
        failure row of the links and switches (detect, per job the reroute and recovery)."""
        rows = {id(inj["row"]): row for inj, row in zip(self.injected, FailureInjector.report(self))}
        out = []
        for row in self.rows:
            r = {k: v for k, v in row.items() if k != "t_fail"}
            r.update({k: v for k, v in rows.get(id(row), {}).items() if k not in ("at",)})
            out.append(r)
        for fault in self.faults[len(self.rows):]:         # the allreduce ended before their moment
            out.append({"kind": fault.kind, "target": fault.target, "planned_at": fault.at, "hold_ms": fault.hold_ms,
                        "skipped": "not reached: the allreduce ended first"})
        return out

    def summary(self) -> dict:
        """The schedule, and what is still down now (nothing, when every fault was undone)."""
        g = self.session.g
        return {"seed": self.chaos_seed, "faults": [asdict(f) for f in self.faults],
                "struck": sum("t_fail" in r for r in self.rows),
                "skipped": len(self.faults) - sum("t_fail" in r for r in self.rows),
                "left": {"switches_down": sorted(self.net.dead),
                         "links_down": sorted(f"{u}-{v}" for u, v, d in g.edges(data=True) if d.get("up", True) is False),
                         "restore_errors": [r["restore_error"] for r in self.rows if "restore_error" in r]}}
