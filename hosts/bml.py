"""BML in-network variant on one BCube server: L parts, one NIC (= level) each per stage.

Part j is allreduced at stage s through the level-((j+s) mod L) switch of this server's
group; after L stages every part holds the global sum. One thread per NIC serves the
parts in the order the schedule gives that NIC ((l - s) mod L at stage s) and waits for a
part's previous stage, so no NIC carries two parts at once and each socket is used by
one thread only.

Under failure (controller/trees/bml_relay.py): the controller re-plans over the live links
and switches and says so in the epoch file (`status: replan`, a new epoch). Every NIC's agent
polls that file (`ScheduleWatch`) and stops at once; the server then runs the relay
schedule of that epoch (`allreduce_relay`) from its own input again, so nothing the
abandoned plan summed half-way can count twice.
"""

from __future__ import annotations

import os
import threading
import time

import numpy as np

from agglab.ground import wire
from agglab.ground.epoch_file import EpochFile
from agglab.hosts.agent import allreduce
from agglab.hosts.transport import UdpTransport


class ScheduleChanged(Exception):
    """The controller re-planned the schedule (a link or level switch failed): run `epoch`'s."""

    def __init__(self, epoch: int, reason: str = ""):
        super().__init__(f"schedule re-planned (epoch {epoch}): {reason}")
        self.epoch = epoch


class ScheduleWatch:
    """An agent's `control`: the epoch file's news. A re-plan newer than the schedule this
    server runs raises ScheduleChanged (the agent stops at once); a partition is passed on
    (the agent raises NetworkPartitionError); anything else is not the agent's business (a
    BML agent's epoch and trees are the schedule's, not the file's)."""

    def __init__(self, path: str | None, epoch: int = 0):
        self.file = EpochFile(path) if path else None
        self.epoch = epoch

    def __call__(self) -> dict | None:
        msg = self.file.poll() if self.file else None
        if not msg:
            return None
        if msg.get("status") == "replan" and int(msg.get("epoch", 0)) > self.epoch:
            raise ScheduleChanged(int(msg["epoch"]), msg.get("reason", ""))
        return msg if msg.get("status") == "partitioned" else None


class Progress:
    """Blocks done over every (part, stage) or step, for the progress file the failure
    injector reads; thread-safe (one agent per NIC reports)."""

    def __init__(self, sink, totals: dict):
        self.sink, self.totals, self.done = sink, totals, {k: 0 for k in totals}
        self.lock = threading.Lock()

    def of(self, key):
        def report(done: int, total: int) -> None:
            with self.lock:
                self.done[key] = done
                if self.sink:
                    self.sink(sum(self.done.values()), sum(self.totals.values()))
        return report


def finished(marker: str, epoch: int) -> None:
    """Say this server holds the total, computed under schedule `epoch` (see linger)."""
    tmp = marker + ".tmp"
    with open(tmp, "w") as f:
        f.write(str(epoch))
    os.replace(tmp, marker)


def linger(markers: list[str], epoch: int, epoch_file: str | None, limit: float) -> None:
    """Wait, once this server holds the total of schedule `epoch`, until every server says
    it finished that schedule or a later one (`finished`); raise ScheduleChanged if the
    controller re-plans before. Why: a server whose last groups completed may hold the total
    while another is still mid-schedule when a failure hits; the re-planned schedule sums
    every server's input again and needs every server, so none leaves while another may
    still need it. Markers are checked first: once all say done, a later re-plan is moot.
    Gives up after `limit` s (a server that died must not keep the others forever)."""
    watch = ScheduleWatch(epoch_file, epoch)
    end = time.monotonic() + limit
    while time.monotonic() < end:
        done = 0
        for path in markers:
            try:
                with open(path) as f:
                    done += int(f.read() or -1) >= epoch
            except (FileNotFoundError, ValueError):
                pass
        if done == len(markers):
            return
        watch()                             # raises ScheduleChanged on a re-plan
        time.sleep(0.002)


def allreduce_bml(array: np.ndarray, plan: dict, service_ip: str, give_up: float = 10.0,
                  link_mbps: float | None = None, epoch_file: str | None = None, on_progress=None):
    """Sum `array` over the plan's BCube servers; `link_mbps`, the rate of this server's
    slowest NIC, paces every NIC's agent (hosts/transport.py `pace`). `epoch_file`: the
    controller's; a re-plan in it raises ScheduleChanged (every NIC's agent stopped)."""
    levels, n = plan["levels"], plan["n"]
    parts = [p.copy() for p in np.array_split(np.asarray(array), levels)]
    done = [threading.Event() for _ in range(levels * levels)]       # (part, stage) finished
    errors: list[BaseException] = []
    totals = {"packets_sent": 0, "retransmissions": 0, "duplicates_ignored": 0}
    lock = threading.Lock()
    started = time.monotonic()
    progress = Progress(on_progress, {(j, s): -(-len(parts[j]) // wire.K) for j in range(levels)
                                      for s in range(levels)})

    nics = {int(k): v for k, v in plan["nics"].items()}             # JSON keys are strings
    ranks = {int(k): v for k, v in plan["rank_in_group"].items()}

    def nic(level: int) -> None:
        info, rank = nics[level], ranks[level]
        transport = UdpTransport(info["ip"], service_ip, device=info["dev"])
        try:
            for stage in range(levels):
                part = (level - stage) % levels
                if stage and not done[part * levels + stage - 1].wait(give_up * levels * 2):
                    raise TimeoutError(f"part {part} never finished stage {stage - 1}")
                if errors:
                    return
                window = max(1, min(plan["window"], -(-len(parts[part]) // wire.K)))
                parts[part], stats = allreduce(parts[part], transport=transport, rank=rank, workers=n,
                                               tree=part, window=window, give_up=give_up, return_stats=True,
                                               link_mbps=link_mbps, control=ScheduleWatch(epoch_file),
                                               on_progress=progress.of((part, stage)))
                with lock:
                    for key in totals:
                        totals[key] += getattr(stats, key)
                done[part * levels + stage].set()
        except BaseException as exc:          # reported by the caller, with the others released
            errors.append(exc)
            for event in done:
                event.set()
        finally:
            transport.close()

    threads = [threading.Thread(target=nic, args=(l,), daemon=True) for l in range(levels)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise next((e for e in errors if isinstance(e, ScheduleChanged)), errors[0])
    totals["seconds"] = time.monotonic() - started
    return np.concatenate(parts), totals


def run_steps(array: np.ndarray, steps: list[dict], group_sum) -> np.ndarray:
    """One server's side of the relay schedule (controller/trees/bml_relay.py host_steps):
    `group_sum(step, contribution)` is the step's allreduce, the sum of every member's
    contribution. "give": what it holds (reduce) or the total (broadcast); "give+take" (the
    root's reduce): what it holds, and the sum is the total; "collect": zeros, the sum is
    added to what it holds; "take": zeros, the sum is the total."""
    held = np.array(array, copy=True)
    total = None
    for step in steps:
        role = step["role"]
        if role == "give" and step["phase"] == "broadcast":
            give = total
        elif role in ("give", "give+take"):
            give = held
        else:
            give = np.zeros_like(held)
        got = group_sum(step, give)
        if role == "collect":
            held = held + got
        elif role in ("give+take", "take"):
            total = got
    return held if total is None else total


def allreduce_relay(array: np.ndarray, plan: dict, service_ip: str, give_up: float = 10.0,
                    link_mbps: float | None = None, epoch_file: str | None = None, on_progress=None):
    """Sum `array` over the BCube servers along the relay schedule of `plan` (a re-plan after a
    failure): its steps one after the other, each a switch allreduce on the NIC that leads to
    the step's switch, under the plan's epoch and the step's tree id. Raises ScheduleChanged
    on a newer re-plan. Each step has a job id of its own (the schedule's steps are the only
    job on BCube's switches): an agent keeps its slots' version alternation per (socket, job)
    and ignores results of another job, so a late copy of one step's result can never be taken
    for the next step's, and every member of a step starts its alternation alike."""
    flat = np.asarray(array).reshape(-1)
    blocks = -(-len(flat) // wire.K)
    window = max(1, min(plan["window"], blocks))
    progress = Progress(on_progress, {s["tree"]: blocks for s in plan["steps"]})
    transports: dict[str, UdpTransport] = {}
    totals = {"packets_sent": 0, "retransmissions": 0, "duplicates_ignored": 0}
    started = time.monotonic()

    def group_sum(step: dict, contribution: np.ndarray) -> np.ndarray:
        nic = plan["nics"][step["switch"]]
        if step["switch"] not in transports:
            transports[step["switch"]] = UdpTransport(nic["ip"], service_ip, device=nic["dev"])
        got, stats = allreduce(contribution, transport=transports[step["switch"]], rank=step["rank"],
                               workers=step["fan_in"], job=step["job"], tree=step["tree"], epoch=plan["epoch"],
                               window=window, give_up=give_up, return_stats=True, link_mbps=link_mbps,
                               control=ScheduleWatch(epoch_file, plan["epoch"]), on_progress=progress.of(step["tree"]))
        for key in totals:
            totals[key] += getattr(stats, key)
        return got

    try:
        result = run_steps(flat, plan["steps"], group_sum)
    finally:
        for t in transports.values():
            t.close()
    totals["seconds"] = time.monotonic() - started
    return result.reshape(np.shape(array)), totals
