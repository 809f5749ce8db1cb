"""In-process multi-switch network: one software-switch Pipeline per switch, agents in threads.

Why: whether a mid-run reroute loses a contribution depends on which packets were in
flight or lost when the tree changed, and a Mininet run hits a given interleaving only
now and then (and takes a minute). Here the real controller (agglab.controller.tree_job.TreeJob:
trees, install, freeze, snapshot, reset, preload, epoch file) programs real Pipelines
for every switch of a topology graph, the real agents run in threads and watch the real
epoch file, every hop may lose a packet, and a link fails when the slowest worker has
done a chosen share of its blocks, so a test can try many failure moments in seconds.

Frames travel hop by hop in the sending thread under one network lock; a control batch
(`commands`) holds it too, as the software switch's daemon runs a batch between two
packets. A link marked down in the graph drops whatever would cross it.
"""

from __future__ import annotations

import queue
import random
import threading
import time
from collections import deque
from pathlib import Path

import numpy as np

from agglab.ground import wire
from agglab.controller.addressing import interface_address
from agglab.controller.schemes import carry_for
from agglab.controller.tree_job import TreeJob
from agglab.controller.switch_client import SoftSwitchClient, SwitchClient, SwitchCommandError
from agglab.controller.topology import neighbor_on_port, port, switches, workers as worker_hosts
from agglab.testkit.fakenet import frame_header
from agglab.hosts.agent import allreduce
from agglab.ground.epoch_file import EpochFile
from agglab.softswitch.cli import CommandError
from agglab.softswitch.pipeline import Pipeline


class PipeClient(SwitchClient):
    """A Pipeline behind the controller's client interface (commands atomic under `lock`).
    A dead one (`dead = True`, a killed switch) answers nothing, as a closed socket."""

    atomic_batches = True          # a batch holds the network lock: no frame crosses it
    pipelined_batches = True       # (send_commands runs at once: the rounds are the same)
    cheap_register_reset = True    # a software pipeline

    def __init__(self, name: str, lock=None):
        self.name, self.pipeline = name, Pipeline(seed=0)
        self.lock = lock or threading.RLock()
        self.dead = False

    def command(self, line: str) -> str:
        with self.lock:
            if self.dead:
                raise SwitchCommandError(f"{self.name}: {line!r}: switch is dead (connection closed)")
            try:
                return self.pipeline.command(line)
            except CommandError as exc:
                raise SwitchCommandError(f"{self.name}: {line!r}: {exc}") from exc

    def commands(self, lines: list[str]) -> list[str]:
        with self.lock:
            return [self.command(line) for line in lines]

    def register_write_range_lines(self, name: str, start: int, values) -> list[str]:
        """The software switch's range write (SoftSwitchClient's form), as the daemon runs it."""
        return [f"register_write_range {name} {start} " + " ".join(str(int(v)) for v in values)]

    # SoftSwitchClient's binary forms (the same Cli runs them)
    register_write_cells_lines = SoftSwitchClient.register_write_cells_lines
    register_write_group_lines = SoftSwitchClient.register_write_group_lines
    register_reset_lines = SoftSwitchClient.register_reset_lines
    table_delete_lines = SoftSwitchClient.table_delete_lines
    register_read_runs_lines = SoftSwitchClient.register_read_runs_lines
    parse_read_runs = SoftSwitchClient.parse_read_runs
    register_read_group_lines = SoftSwitchClient.register_read_group_lines
    parse_read_group = SoftSwitchClient.parse_read_group


class HostTransport:
    """A worker's single NIC: send() carries the frame through the network in this thread."""

    def __init__(self, net: "TreeNet", host: str):
        self.net, self.host = net, host
        [self.leaf] = net.g.neighbors(host)
        self.ip, self.mac = interface_address(net.g, host, self.leaf)
        self.inbox: queue.SimpleQueue = queue.SimpleQueue()

    def send(self, payload: bytes) -> None:
        self.net.inject(self.host, frame_header(self.mac, self.ip, len(payload)) + bytes(payload))

    def recv(self, timeout: float) -> bytes | None:
        try:
            return self.inbox.get(timeout=timeout) if timeout > 0 else self.inbox.get_nowait()
        except queue.Empty:
            return None


class TreeNet:
    """A topology graph (built by agglab.controller.topologies, workers ranked) run in-process."""

    def __init__(self, g, tree: str, window: int, epoch_file: Path, *, loss: float = 0.0,
                 seed: int = 0, job_args: dict | None = None):
        self.g, self.loss = g, loss
        self.rng = random.Random(seed)
        self.lock = threading.RLock()
        self.clients = {sw: PipeClient(sw, self.lock) for sw in switches(g)}
        self.hosts = worker_hosts(g)
        self.transports = {h: HostTransport(self, h) for h in self.hosts}
        self.epoch_file = Path(epoch_file)
        self.job = TreeJob(g, self.clients, tree, self.hosts, window, self.epoch_file,
                           carry_for=carry_for, drain=0.0, **(job_args or {})).start()
        self.delivered = 0

    def _crosses(self, a: str, b: str) -> bool:
        if (a in self.clients and self.clients[a].dead) or (b in self.clients and self.clients[b].dead):
            return False                      # a killed switch: everything into or out of it is lost
        return self.g.edges[a, b].get("up", True) and not (self.loss and self.rng.random() < self.loss)

    def kill(self, sw: str) -> None:
        """A switch dies: its pipeline (tables, registers) is gone and every frame to it is
        lost; then the controller is told, as the switch watcher tells it of a process exit."""
        with self.lock:
            self.clients[sw].dead = True
        self.job.switch_changed(sw, False, time.monotonic())

    def restart(self, sw: str) -> None:
        """A dead switch starts again, empty (a new pipeline in the shared clients dict), and
        the controller is told, as Session.restart_switch tells it."""
        with self.lock:
            self.clients[sw] = PipeClient(sw, self.lock)
        self.job.switch_changed(sw, True, time.monotonic())

    def inject(self, host: str, frame: bytes) -> None:
        with self.lock:
            leaf = self.transports[host].leaf
            if not self._crosses(host, leaf):
                return
            pending = deque([(leaf, port(self.g, leaf, host), frame)])
            while pending:
                sw, p, f = pending.popleft()
                for out_port, out in self.clients[sw].pipeline.process(p, f):
                    nbr = neighbor_on_port(self.g, sw, out_port)
                    if not self._crosses(sw, nbr):
                        continue
                    if self.g.nodes[nbr]["kind"] == "switch":
                        pending.append((nbr, port(self.g, nbr, sw), out))
                    elif nbr in self.transports:
                        self.delivered += 1
                        self.transports[nbr].inbox.put(bytes(out[wire.AGG_OFFSET:]))

    def run(self, arrays: list[np.ndarray], *, fail_at: tuple[float, ...] = (), fail_seed: int = 0,
            pick=None, kill: bool = False, join_timeout: float = 120.0, **kwargs) -> tuple[list, list[dict]]:
        """allreduce(arrays[rank]) on every worker; a link fails when the slowest worker has
        done each share in `fail_at`: pick(job, i) if given, else a tree link as
        `--fail tree@x` picks it; with `kill`, a switch dies instead: pick(job, i) if given,
        else as `--fail-switch tree@x` picks it. Returns (per rank a result or the exception,
        the failures injected: link or switch, and progress).

        The failure is injected by the worker thread whose progress report makes the
        slowest worker reach the share, before that thread goes on: where it lands is
        fixed by the order of events, not by how fast a watcher thread gets scheduled
        (16 agents and a watcher on a loaded 2-core machine used to miss the moment)."""
        n = len(self.hosts)
        progress = [0.0] * n
        results: list = [None] * n
        self.job.prepare(kwargs.get("window") or self.job.window,
                         "omnireduce" if kwargs.get("sparse") else "switchml")

        pending = sorted(fail_at)
        injected: list[dict] = []
        injecting = threading.Lock()

        def fail_links_due() -> None:
            with injecting:
                while pending and min(progress) >= pending[0]:
                    i = len(injected)
                    pending.pop(0)
                    if kill:
                        with self.job.locked():
                            sw = pick(self.job, i) if pick else self.job.pick_tree_switch(fail_seed + i)
                        injected.append({"switch": sw, "at": round(min(progress), 3)})
                        self.kill(sw)
                        continue
                    with self.job.locked():
                        a, b = pick(self.job, i) if pick else self.job.pick_tree_link(fail_seed + i)
                    injected.append({"link": f"{a}-{b}", "at": round(min(progress), 3)})
                    self.job.link_changed(a, b, False, time.monotonic())

        def work(rank: int) -> None:
            watcher = EpochFile(str(self.epoch_file))
            first = watcher.poll()

            def on_progress(done: int, total: int) -> None:
                progress[rank] = done / max(1, total)
                if pending:
                    fail_links_due()

            try:
                results[rank] = allreduce(arrays[rank], transport=self.transports[self.hosts[rank]],
                                          rank=rank, workers=n, job=self.job.job,
                                          epoch=first["epoch"], tree_of_slot=first["tree_of_slot"],
                                          control=watcher.poll, on_progress=on_progress,
                                          return_stats=True, **kwargs)
            except BaseException as exc:   # collected and checked by the test
                results[rank] = exc
            progress[rank] = 1.0

        threads = [threading.Thread(target=work, args=(r,), daemon=True) for r in range(n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(join_timeout)
        stuck = [r for r, t in enumerate(threads) if t.is_alive()]
        assert not stuck, f"workers {stuck} still running after {join_timeout} s"
        return results, injected
