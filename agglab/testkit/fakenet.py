"""In-process network for agent tests: N agents in threads around one switch.

Why: the agent's protocol logic (windows, versions, loss recovery, consistency
check) must be tested fast and deterministically enough for CI, without
namespaces or root.  Two switch back-ends sit behind the same harness:

* `ModelSwitch`: the aggregation semantics of docs/design/ written directly on UDP
  payloads, used to test the agent on its own;
* the project's software switch (`softswitch.pipeline.Pipeline`), fed real
  Ethernet/IPv4/UDP frames and programmed with simple_switch_CLI commands, so the
  agent and the switch are tested together.

Worker i sits on switch port i+1 with IP 10.0.0.(i+1).  Loss is simulated on
both directions with a seeded RNG; `mute` ranks never receive anything.
`bottleneck_mbps` puts every frame the switch sends on one FIFO link of that rate (a slow
link between the switch and the workers: a result crosses it once, then fans out), so a
window's queueing delay and what resends add to it are modelled.
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
import time

import numpy as np

from softswitch.pipeline import Pipeline
from softswitch.star import star_commands

from ground import wire
from ground.addresses import SERVICE_IP, SERVICE_MAC, host_ip, host_mac
from hosts.agent import allreduce
from hosts.protocol import LAYOUT

_H = wire.AGG_HEADER_BYTES


def _get(payload: bytes, name: str) -> int:
    word, shift, mask = LAYOUT[name]
    return (wire.AGG_STRUCT.unpack_from(payload)[word] >> shift) & mask


def _with_result(payload: bytes, values: np.ndarray, exp: int) -> bytes:
    words = list(wire.AGG_STRUCT.unpack_from(payload))
    for name, value in (("flags", _get(payload, "flags") | wire.FLAG_RESULT), ("exp", exp)):
        word, shift, mask = LAYOUT[name]
        words[word] = (words[word] & ~(mask << shift)) | (value << shift)
    return wire.AGG_STRUCT.pack(*words) + values.astype(">i4").tobytes()


class ModelSwitch:
    """docs/design/aggregation.md "Aggregation semantics" on payloads; children 0..n-1, one job, slot_base 0."""

    def __init__(self, n: int) -> None:
        self.n = n
        rows = 2 * wire.SLOTS
        self.values = np.zeros((rows, wire.K), np.int32)
        self.bitmap, self.count, self.exp = [0] * rows, [0] * rows, [0] * rows
        self.stats = {"contrib": 0, "complete": 0, "dup_reply": 0, "dup_drop": 0}

    def process(self, child: int, p: bytes) -> list[tuple[int, bytes]]:
        """Returns (child, payload) deliveries; child None means multicast to all."""
        v, slot = _get(p, "ver"), _get(p, "slot")
        r, o, bit = v * wire.SLOTS + slot, (1 - v) * wire.SLOTS + slot, 1 << child
        lanes = np.frombuffer(p, ">i4", wire.K, _H).astype(np.int32)
        if not self.bitmap[r] & bit:
            self.bitmap[o] &= ~bit
            if self.bitmap[r] == 0:
                self.values[r], self.exp[r], self.count[r] = lanes, _get(p, "exp"), 1
            else:
                self.values[r] += lanes            # int32 wrap-around
                self.exp[r] = max(self.exp[r], _get(p, "exp"))
                self.count[r] += 1
            self.bitmap[r] |= bit
            self.stats["contrib"] += 1
            if self.count[r] == self.n:
                self.stats["complete"] += 1
                return [(None, _with_result(p, self.values[r], self.exp[r]))]
            return []
        if self.count[r] == self.n:
            self.stats["dup_reply"] += 1
            return [(child, _with_result(p, self.values[r], self.exp[r]))]
        self.stats["dup_drop"] += 1
        return []


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


class SlowLink:
    """A FIFO link of `mbps` in a thread: put(deliver) runs deliver() once the frame before it
    and this frame's own wire.FRAME_BYTES have been serialized."""

    def __init__(self, mbps: float) -> None:
        self.frame_time = wire.FRAME_BYTES * 8 / (mbps * 1e6)
        self.queue: queue.SimpleQueue = queue.SimpleQueue()
        self.frames = 0
        threading.Thread(target=self._serve, daemon=True).start()

    def put(self, deliver) -> None:
        self.frames += 1
        self.queue.put(deliver)

    def _serve(self) -> None:
        free = time.monotonic()
        while True:
            deliver = self.queue.get()
            free = max(free, time.monotonic()) + self.frame_time
            time.sleep(max(0.0, free - time.monotonic()))
            deliver()


class FakeNet:
    """N workers around one switch; `run` performs one allreduce on every worker."""

    def __init__(self, n: int, *, backend: str = "model", loss: float = 0.0, seed: int = 0,
                 mute: tuple[int, ...] = (), pipeline=None, bottleneck_mbps: float | None = None) -> None:
        self.n, self.loss, self.mute = n, loss, set(mute)
        self.link = SlowLink(bottleneck_mbps) if bottleneck_mbps else None
        self.rng = random.Random(seed)
        self.lock = threading.Lock()
        self.transports = [MemTransport(self, i) for i in range(n)]
        self.frames = backend == "pipeline"
        self.delivered = [0] * n
        self.accept_epoch: int | None = None
        self.record, self.sent = False, []
        if self.frames:
            if pipeline is None:
                pipeline = Pipeline()
                for cmd in star_commands(n):
                    pipeline.command(cmd)
            self.switch = pipeline
        else:
            self.switch = ModelSwitch(n)

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
            if self.frames:
                out = [(port - 1, frame) for port, frame in
                       self.switch.process(rank + 1, make_frame(rank, payload))]
            else:
                out = self.switch.process(rank, payload)
            for dest, data in out:
                if self.link:
                    self.link.put(functools.partial(self._deliver_locked, dest, data))
                else:
                    self._deliver(dest, data)

    def _deliver_locked(self, dest: int | None, data: bytes) -> None:
        with self.lock:
            self._deliver(dest, data)

    def _deliver(self, dest: int | None, data: bytes) -> None:
        for d in (range(self.n) if dest is None else (dest,)):
            if d in self.mute or self._lost():
                continue
            if self.frames:
                self._check_frame(d, data)
            self.delivered[d] += 1
            self.transports[d].inbox.put(data[wire.AGG_OFFSET:] if self.frames else data)

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
