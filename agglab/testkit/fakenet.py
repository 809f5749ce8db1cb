"""In-process network for agent tests: N agents in threads around one switch.

Why: the agent's protocol logic (windows, versions, loss recovery, consistency
check) must be tested fast and deterministically enough for CI, without
namespaces or root.  The switch is the project's software switch
(`agglab.softswitch.pipeline.Pipeline`), in-process, fed real Ethernet/IPv4/UDP frames and
programmed with simple_switch_CLI commands, so every agent test runs against the
switch the emulator runs, not a second hand-written model of it (`PayloadSwitch`
puts the same pipeline behind an agent's payloads, for transports of a test's own).

Worker i sits on switch port i+1 with IP 10.0.0.(i+1).  Loss is simulated on
both directions with a seeded RNG; `mute` ranks never receive anything.
`accept_epoch` (when set) drops worker packets of any other epoch, like a
switch whose agg_job entries were replaced; `record` keeps every packet's
(rank, slot, tree, epoch) in `sent`.
"""

from __future__ import annotations

import functools
import queue
import random
import struct
import threading

from agglab.softswitch.pipeline import Pipeline
from agglab.softswitch.star import star_commands

from agglab.ground import wire
from agglab.ground.addresses import SERVICE_IP, SERVICE_MAC, host_ip, host_mac
from agglab.hosts.agent import allreduce
from agglab.hosts.protocol import LAYOUT


def _get(payload: bytes, name: str) -> int:
    word, shift, mask = LAYOUT[name]
    return (wire.AGG_STRUCT.unpack_from(payload)[word] >> shift) & mask


class PayloadSwitch:
    """The software switch's Pipeline behind agents' payloads: worker `rank` on port rank+1 of a
    star of `n` (softswitch/star.py), its payloads framed as the kernel would, the results
    unframed. For transports of a test's own (a slow link on a fake clock, a loopback service)."""

    def __init__(self, n: int, pipeline=None) -> None:
        if pipeline is None:
            pipeline = Pipeline()
            for cmd in star_commands(n):
                pipeline.command(cmd)
        self.n, self.pipeline = n, pipeline

    def process(self, rank: int, payload: bytes) -> list[tuple[int, bytes]]:
        """The (worker, result payload) deliveries of one payload from worker `rank`."""
        return [(port - 1, frame[wire.AGG_OFFSET:])
                for port, frame in self.pipeline.process(rank + 1, make_frame(rank, payload))]

    def stat(self, name: str) -> int:
        """agg_stats[STAT_<name>] (p4src/include/constants.p4), e.g. stat("DUP_REPLY")."""
        return int(self.pipeline.counters["agg_stats"][wire.CONST[f"STAT_{name}"]])


class MemTransport:
    """A worker's end of the harness: send() runs the switch in the caller's thread."""

    def __init__(self, net: "FakeNet", rank: int) -> None:
        self.net, self.rank, self.inbox = net, rank, queue.SimpleQueue()

    def send(self, payload: bytes) -> None:
        self.net._from_worker(self.rank, bytes(payload))

    def recv(self, timeout: float) -> bytes | None:
        try:
            return self.inbox.get(timeout=timeout) if timeout > 0 else self.inbox.get_nowait()
        except queue.Empty:
            return None


def _ip(addr: str) -> bytes:
    return bytes(int(x) for x in addr.split("."))


def _mac(addr: str) -> bytes:
    return bytes.fromhex(addr.replace(":", ""))


@functools.lru_cache(maxsize=None)
def _addresses(rank: int) -> tuple[bytes, bytes]:
    return _mac(host_mac(rank + 1)), _ip(host_ip(rank + 1))


def make_frame(rank: int, payload: bytes) -> bytes:
    """Ethernet/IPv4/UDP frame from worker `rank` to the aggregation service."""
    return frame_header(host_mac(rank + 1), host_ip(rank + 1), len(payload)) + payload


@functools.lru_cache(maxsize=None)
def frame_header(mac: str, ip_addr: str, size: int) -> bytes:
    """Ethernet/IPv4/UDP headers of a `size`-byte payload from (mac, ip_addr) to the service."""
    udp = struct.pack("!HHHH", wire.UDP_PORT, wire.UDP_PORT, 8 + size, 0)
    ip = bytearray(struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(udp) + size, 0, 0,
                               64, 17, 0, _ip(ip_addr), _ip(SERVICE_IP)))
    csum = sum(struct.unpack("!10H", ip))
    csum = (csum & 0xFFFF) + (csum >> 16)
    csum = (csum & 0xFFFF) + (csum >> 16)
    ip[10:12] = struct.pack("!H", ~csum & 0xFFFF)
    eth = _mac(SERVICE_MAC) + _mac(mac) + b"\x08\x00"
    return eth + bytes(ip) + udp


class FakeNet:
    """N workers around one switch; `run` performs one allreduce on every worker."""

    def __init__(self, n: int, *, backend: str = "pipeline", loss: float = 0.0, seed: int = 0,
                 mute: tuple[int, ...] = (), pipeline=None) -> None:
        assert backend == "pipeline", backend      # the only switch (the callers still name it)
        self.n, self.loss, self.mute = n, loss, set(mute)
        self.rng = random.Random(seed)
        self.lock = threading.Lock()
        self.transports = [MemTransport(self, i) for i in range(n)]
        self.delivered = [0] * n
        self.accept_epoch: int | None = None
        self.record, self.sent = False, []
        self.payloads = PayloadSwitch(n, pipeline)
        self.switch = self.payloads.pipeline

    def _lost(self) -> bool:
        return self.loss > 0 and self.rng.random() < self.loss

    def _from_worker(self, rank: int, payload: bytes) -> None:
        with self.lock:
            if self.record:
                self.sent.append((rank, _get(payload, "slot"), _get(payload, "tree"),
                                  _get(payload, "epoch")))
            if self._lost():
                return
            if self.accept_epoch is not None and _get(payload, "epoch") != self.accept_epoch:
                return
            out = [(port - 1, frame) for port, frame in self.switch.process(rank + 1, make_frame(rank, payload))]
            for dest, data in out:
                self._deliver(dest, data)

    def _deliver(self, dest: int, data: bytes) -> None:
        if dest in self.mute or self._lost():
            return
        self._check_frame(dest, data)
        self.delivered[dest] += 1
        self.transports[dest].inbox.put(data[wire.AGG_OFFSET:])

    @staticmethod
    def _check_frame(rank: int, frame: bytes) -> None:
        """Results must be addressed to the worker behind the port (agg_reply)."""
        mac, ip = _addresses(rank)
        assert frame[0:6] == mac, f"result to port {rank + 1} has wrong dst MAC"
        assert frame[30:34] == ip, f"result to port {rank + 1} has wrong dst IP"

    def run(self, arrays, *, join_timeout: float = 120.0, per_rank=None, **kwargs) -> list:
        """allreduce(arrays[i]) on worker i in threads; per rank a result tuple or the exception.

        kwargs go to every allreduce call, per_rank[i] (a dict) only to rank i's.
        """
        results: list = [None] * self.n

        def work(i: int) -> None:
            args = dict(workers=self.n, return_stats=True, **kwargs)
            args.update(per_rank[i] if per_rank else {})
            try:
                results[i] = allreduce(arrays[i], transport=self.transports[i], rank=i, **args)
            except BaseException as exc:   # collected and checked by the test
                results[i] = exc

        threads = [threading.Thread(target=work, args=(i,), daemon=True) for i in range(self.n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(join_timeout)
        stuck = [i for i, t in enumerate(threads) if t.is_alive()]
        assert not stuck, f"workers {stuck} still running after {join_timeout} s"
        return results


def sparse_net(n: int, **kwargs) -> FakeNet:
    """N workers around a Pipeline with one job's agg_job and sp_job entries."""
    pipeline = Pipeline(seed=kwargs.get("seed", 0))
    for cmd in star_commands(n):
        pipeline.command(cmd)
    return FakeNet(n, backend="pipeline", pipeline=pipeline, **kwargs)
