"""The fidelity record of a run spread over servers: every server's samples merged, and the
loss on the tunnels between them.

Why: a run is worth reporting only if its links, not the emulator's CPU, were the
bottleneck, and in cluster mode the links, switches and workers are on the servers. Each
server's agent samples what is there (agglab.emulation.cluster.sampler.ServerSampler: the counters at the
switch end of each of its links, its processes' CPU, its busy time); the head places those
samples on its own clock (offset measured with one round trip to each agent when the probe
starts, as Cristian's algorithm does) and gives them to the same verdict as one machine
(agglab.emulation.fidelity.summarize), so "link-bound" means the same thing on one machine and on
several. The busiest server's CPU is the one that counts.

Tunnel loss: a frame one switch sent into a VXLAN tunnel (tx_packets at its end) that the
other end never received (rx_packets there) was lost in the underlay, which the emulated
link does not model: the record says how many.
"""

from __future__ import annotations

import base64
import json
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from agglab.emulation.fidelity import COUNTERS, SAMPLE_SECONDS, directions, link_ends, summarize

CLOCK_WAIT = 5.0      # s for an agent's answer to `clock`
SAMPLES_WAIT = 15.0   # s for its samples (a long run's samples are a few hundred kB)


class ClusterProbe:
    """Started when the workers start, stopped when they end, like FidelityProbe."""

    def __init__(self, graph, placement: dict[str, str], agents: dict, run_dir: Path,
                 tunnels: list[tuple[str, str]], interval: float = SAMPLE_SECONDS):
        self.graph, self.placement, self.agents = graph, placement, agents
        self.run_dir, self.tunnels, self.interval = Path(run_dir), list(tunnels), interval
        self.offsets: dict[str, float] = {}
        self.ends: list[tuple[str, str, str, str, float | None]] = []   # (sw, other, intf, server, rate)
        intfs: dict[str, set[str]] = {name: set() for name in agents}
        for sw, other, intf, rate in link_ends(graph):
            self.ends.append((sw, other, intf, placement[sw], rate))
            intfs[placement[sw]].add(intf)
        for u, v in self.tunnels:             # both ends of a tunnel: the receiver's rx counts its loss
            for n in (u, v):
                intfs[placement[n]].add(graph.edges[u, v]["intfs"][n])
        self.intfs = {name: sorted(names) for name, names in intfs.items()}
        self.started = self.finished = 0.0
        self.begun: float | None = None

    def begin(self) -> None:
        """The timed allreduce starts now: judge what follows only (FidelityProbe.begin)."""
        self.begun = time.monotonic()

    def start(self) -> "ClusterProbe":
        self.started = time.monotonic()
        for name, offset in zip(self.agents, self._each(self._clock)):
            if offset is not None:
                self.offsets[name] = offset
                self.agents[name].tell(f"probe {self.interval} {self.run_dir} {','.join(self.intfs[name]) or '-'}")
        return self

    def _each(self, fn) -> list:
        with ThreadPoolExecutor(max_workers=max(1, len(self.agents))) as pool:
            return list(pool.map(fn, list(self.agents)))

    def _clock(self, name: str) -> float | None:
        return self.agents[name].clock_offset(CLOCK_WAIT)

    def _samples(self, name: str) -> dict | None:
        if name not in self.offsets:
            return None
        reply = self.agents[name].ask("probe-stop", "samples", SAMPLES_WAIT)
        try:
            return json.loads(base64.b64decode(reply)) if reply else None
        except ValueError:
            return None

    def stop(self) -> dict:
        got = dict(zip(self.agents, self._each(self._samples)))
        self.finished = time.monotonic()
        return merge(self.graph, self.placement, self.ends, self.tunnels,
                     {n: d for n, d in got.items() if d}, self.offsets, self.started, self.finished, self.begun)


def merge(graph, placement: dict[str, str], ends, tunnels, samples: dict[str, dict],
          offsets: dict[str, float], started: float, finished: float, since: float | None = None) -> dict:
    """One fidelity record from each server's samples (`samples[server]` as ServerSampler.stop
    returns it, its times `offsets[server]` ahead of the head's clock)."""
    def series(server: str, intf: str, counter: str) -> list[tuple[float, int]]:
        rows = samples.get(server, {}).get("counters", {}).get(intf, [])
        i = 1 + COUNTERS.index(counter)
        return [(row[0] - offsets[server], row[i]) for row in rows]

    sampled = []
    for sw, other, intf, server, rate in ends:
        for d in directions(sw, other, intf, rate):
            d.samples = series(server, intf, d.counter)
            sampled.append(d)
    cpu, labels, machines = {}, {}, []
    switches = {n for n in graph.nodes if graph.nodes[n]["kind"] == "switch"}
    for server, data in samples.items():
        off = offsets[server]
        for stem, rows in data.get("cpu", {}).items():
            if stem in switches and placement.get(stem) != server:
                continue                       # not this server's switch: never ours to count
            key = f"{server}:{stem}"           # a switch's name, or a worker's log stem (rank3, j1rank0)
            cpu[key] = [(t - off, s) for t, s in rows]
            labels[key] = f"{stem} data plane" if stem in switches else stem
        machines.append([(t - off, (b, a)) for t, b, a in data.get("machine", [])])
    cores = min((d.get("cores", 1) for d in samples.values()), default=1)
    record = summarize(sampled, cpu, labels, machines, cores, started, finished, since=since)
    record["servers_sampled"] = sorted(samples)
    missing = sorted(set(placement.values()) - set(samples))
    if missing:
        record["servers_missing"] = missing
        record["reason"] += f"; no samples from {', '.join(missing)}"
    record["tunnels"] = tunnel_loss(graph, placement, tunnels, series)
    return record


def tunnel_loss(graph, placement, tunnels, series) -> dict:
    """Frames sent into the tunnels and lost between their ends, over the whole probe."""
    def grew(rows: list[tuple[float, int]]) -> int:
        return rows[-1][1] - rows[0][1] if len(rows) >= 2 else 0

    sent = lost = 0
    for u, v in tunnels:
        intfs = graph.edges[u, v]["intfs"]
        for a, b in ((u, v), (v, u)):
            tx = grew(series(placement[a], intfs[a], "tx_packets"))
            rx = grew(series(placement[b], intfs[b], "rx_packets"))
            sent += tx
            lost += max(0, tx - rx)
    return {"links": len(tunnels), "frames": sent, "lost": lost,
            "loss": round(lost / sent, 6) if sent else 0.0}
