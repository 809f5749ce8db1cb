"""What the live page shows, sampled in a thread of its own: ~4 times a second the links
(kernel state and byte counters of each link's switch end), the trees and epoch of every
job, the workers' progress and the event log; once a second the switches' aggregation
counters and slot occupancy (a control-socket read per switch, under the job's lock: more
often would take the switches' time from the allreduce).

Why the kernel's view of a link (IFF_UP of its switch-side interface in /sys) and not the
controller's: the page must show what the network does; the controller's view (the graph's
`up`) is sent beside it, so a lag between them is visible.
"""

from __future__ import annotations

import json
import re
import threading
import time
from pathlib import Path

from agglab.actions import Actions, progress
from agglab.controller import drawing
from agglab.controller.topology import natural_key, switches
from agglab.controller.trees.base import edge_key
from agglab.event_words import event_line, raw

PERIOD = 0.25        # seconds between two samples
SLOW_EVERY = 4       # switch counters every SLOW_EVERY samples
EVENTS = 200         # the page keeps the last EVENTS events


def link_interfaces(session) -> dict[tuple[str, str], str]:
    """Per link (edge_key), the name of its switch-side interface (root namespace: the page
    reads its counters in /sys), through Mininet's own view of the links."""
    net = session.net.net
    out = {}
    for u, v in session.g.edges:
        pairs = net.get(u).connectionsTo(net.get(v))
        if not pairs:
            continue
        iu, iv = pairs[0]
        sw_intf = iu if session.g.nodes[u]["kind"] == "switch" else iv
        out[edge_key(u, v)] = sw_intf.name
    return out


def _read_int(path: str) -> int | None:
    try:
        with open(path) as fh:
            return int(fh.read().strip(), 0)
    except (OSError, ValueError):
        return None


class LiveState:
    """Samples `session` (and what `actions` started) until stopped; `latest` is the last
    sample as JSON text, `seq` counts them (the stream sends each new one)."""

    def __init__(self, session, actions: Actions, lab: bool = True):
        self.session, self.actions, self.lab = session, actions, lab
        self.intfs = link_interfaces(session)
        self.topology = self._topology()
        self.latest = "{}"
        self.seq = 0
        self.changed = threading.Condition()
        self._stop = threading.Event()
        self._bytes: dict[tuple[str, str], tuple[float, int, int]] = {}
        self._done: dict[int, tuple[float, int]] = {}
        self._switches: dict = {}
        self._thread = threading.Thread(target=self._loop, daemon=True, name="web-sampler")

    def start(self) -> "LiveState":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)

    # -- what does not change -----------------------------------------------------------
    def _topology(self) -> dict:
        g = self.session.g
        pos = drawing.positions(g)
        nodes = [{"id": n, "kind": d["kind"], "tier": d.get("tier", "host" if d["kind"] == "host" else ""),
                  "rank": d.get("rank"), "x": pos.get(n, (0, 0))[0], "y": pos.get(n, (0, 0))[1]}
                 for n, d in sorted(g.nodes(data=True), key=lambda nd: natural_key(nd[0]))]
        links = [{"id": f"{a}-{b}", "a": a, "b": b, "bw": g.edges[a, b].get("bw"), "intf": self.intfs.get((a, b))}
                 for a, b in sorted(edge_key(u, v) for u, v in g.edges)]
        return {"nodes": nodes, "links": links, "switches": switches(g), "lab": self.lab,
                "name": g.graph.get("name", self.session.spec.topology), "palette": list(drawing.PALETTE)}

    # -- sampling ---------------------------------------------------------------------
    def _loop(self) -> None:
        tick = 0
        while not self._stop.is_set():
            started = time.monotonic()
            try:
                if tick % SLOW_EVERY == 0:
                    self._switches = self._switch_sample()
                text = json.dumps(self.sample(), default=str)
            except Exception as exc:        # noqa: BLE001 - the page says so; sampling goes on
                text = json.dumps({"error": f"sampling failed: {str(exc).splitlines()[0] if str(exc) else exc!r}",
                                   "t": time.time()})
            with self.changed:
                self.latest, self.seq = text, self.seq + 1
                self.changed.notify_all()
            tick += 1
            self._stop.wait(max(0.0, PERIOD - (time.monotonic() - started)))

    def sample(self) -> dict:
        s = self.session
        self.actions.note_trees()
        return {"t": time.time(), "links": self._links(), "jobs": [self._job(j) for j in s.jobs],
                "switches": self._switches, "workers": self._workers(), "run": self._run(),
                "events": self._events(), "reroutes": self._reroutes(),
                "dead": sorted(s.net.dead, key=natural_key)}

    def _links(self) -> list[dict]:
        now = time.monotonic()
        out = []
        for a, b in sorted(self.intfs):
            intf = self.intfs[a, b]
            base = f"/sys/class/net/{intf}"
            flags = _read_int(f"{base}/flags")
            tx, rx = _read_int(f"{base}/statistics/tx_bytes") or 0, _read_int(f"{base}/statistics/rx_bytes") or 0
            last = self._bytes.get((a, b))
            self._bytes[a, b] = (now, tx, rx)
            mbps = None
            if last and now > last[0]:
                mbps = max(tx - last[1], rx - last[2], 0) * 8 / (now - last[0]) / 1e6
            bw = self.session.g.edges[a, b].get("bw")
            out.append({"id": f"{a}-{b}", "up": bool(flags is not None and flags & 1),
                        "controller_up": self.session.g.edges[a, b].get("up", True) is not False,
                        "mbps": None if mbps is None else round(mbps, 3),
                        "util": None if mbps is None or not bw else round(min(1.0, mbps / bw), 3)})
        return out

    def _job(self, job) -> dict:
        st = job.state()
        ts = st.treeset
        return {"job": job.job, "tree": st.tree, "algorithm": st.algorithm, "epoch": ts.epoch, "partitioned": st.partitioned,
                "window": st.window,
                "trees": [{"index": i, "name": drawing.tree_name(ts, i), "root": t.root, "weight": t.weight,
                           "colour": drawing.tree_colour(i), "slots": st.tree_of_slot.count(t.id),
                           "edges": [f"{a}-{b}" for a, b in sorted(t.edges)]} for i, t in enumerate(ts.trees)]}

    def _switch_sample(self) -> dict:
        """Per live switch: its aggregation counters and how many slot-versions hold a round.
        Software switches: one pipelined batch to every switch at once under the job's lock
        (a reroute waits for one round trip, not 14 reads per switch); others: read in turn."""
        from agglab.controller import aggregate  # lazy: loads numpy, only _switch_sample() needs it
        from agglab.controller.switch_batches import run_batches  # lazy: loads numpy, only _switch_sample() needs it

        job = self.session.job
        live = [sw for sw in job.live_switches() if sw in job.clients]
        try:
            if self.session.spec.backend == "soft":
                lines = aggregate.stats_lines()
                with job.locked():
                    outs = run_batches({sw: job.clients[sw] for sw in live},
                                       {sw: [*lines, "register_read agg_count"] for sw in live})
                stats = {sw: aggregate.parse_stats(sw, outs[sw][:len(lines)]) for sw in live}
                counts = {sw: re.findall(r"-?\d+", outs[sw][len(lines)].split("=", 1)[-1]) for sw in live}
                slots = {sw: (sum(1 for c in cs if int(c)), len(cs)) for sw, cs in counts.items()}
            else:
                stats = job.switch_stats()
                slots = {}
                for sw in stats:
                    count = job.read_registers(sw, ("agg_count",))["agg_count"]
                    slots[sw] = (sum(1 for c in count if c), len(count))
        except Exception:                   # noqa: BLE001 - a switch died mid-read: next time
            return self._switches
        out = {}
        for sw in switches(self.session.g):
            if sw not in stats:
                out[sw] = {"alive": False}
                continue
            used, size = slots.get(sw, (None, None))
            out[sw] = {"alive": True, "counters": stats[sw], "slots_used": used, "slots": size}
        return out

    def _workers(self) -> list[dict]:
        s, now = self.session, time.monotonic()
        p = progress(s, self.actions) if s.job else None
        run_dir = s.net.run.path / f"run{s.runs}" if s.net.run is not None else None
        out = []
        for rank, host in enumerate(s.job.workers if s.job else []):
            seen = p.per_worker[rank] if p else None
            done, total = seen if seen else (0, 0)
            last = self._done.get(rank)
            rate = None
            if last and now > last[0] and done >= last[1]:
                rate = (done - last[1]) / (now - last[0])
            self._done[rank] = (now, done)
            retx = None
            report = run_dir / f"rank{rank}.json" if run_dir else None
            if report is not None and report.exists():
                try:
                    retx = json.loads(Path(report).read_text()).get("retransmissions")
                except (OSError, ValueError):
                    retx = None
            out.append({"rank": rank, "host": host, "done": done, "total": total,
                        "rate": None if rate is None else round(rate, 1), "retransmissions": retx})
        return out

    def _run(self) -> dict:
        a = self.actions
        p = progress(self.session, a) if self.session.job else None
        return {"running": a.running, "runs": self.session.runs, "opts": a.run.opts, "outcome": a.run.outcome,
                "done": p.done if p else 0, "total": p.total if p else 0,
                "rate": round(p.rate, 1) if p else 0, "eta": None if not p or p.eta is None else round(p.eta, 1)}

    def _events(self) -> list[dict]:
        log = self.session.events
        events = list(log.events)[-EVENTS:]
        # in words as the lab prints them (agglab/event_words.py); the raw fields beside, for the
        # page's "raw fields" toggle and each line's tooltip
        return [{"t": round(t - log.t0, 3), "kind": kind, "text": event_line(log.t0, t, kind, info),
                 "raw": raw(kind, info).rstrip()} for t, kind, info in events]

    def _reroutes(self) -> list[dict]:
        """Each reroute: what failed, detect (the link set down here -> netlink seen), recompute
        and install ms, and the install's phases."""
        out = []
        for job in self.session.jobs:
            for rec in job.failure_records():
                row = {k: v for k, v in rec.items() if isinstance(v, (int, float, str, bool)) or v is None}
                if "link" in rec:
                    t_set = self.actions.changed.get(frozenset(rec["link"].split("-")))
                    if t_set is not None and rec.get("t_detect") is not None:
                        row["detect_ms"] = round((rec["t_detect"] - t_set) * 1e3, 2)
                row.pop("t_detect", None)
                row["job"] = job.job
                out.append(row)
        return out
