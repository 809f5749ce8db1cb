"""Differential runs: one packet sequence through the twin and BMv2 (or the twin's batched
path), compared packet by packet; a divergence is written out as a conformance vector.

Why compare two implementations instead of checking a model: the twin (softswitch/) claims
to *be* p4src/agglab.p4, byte for byte and register for register, so every sequence is a
test case with no expectation to write: whatever one emits or stores, the other must too.

Per packet of a sequence (agglab/testkit/seqgen.py), `run_pair` compares
- every emitted frame and its egress port (as multisets: BMv2's egress threads do not
  promise an order across ports);
- the registers: after every packet the cells the twin has changed since the sequence began
  (read from BMv2 cell by cell, pipelined), since reading all of BMv2's ~310,000 cells takes
  ~0.2 s; after the last packet *every* cell of every register (a cell BMv2 changed and the
  twin did not shows up there);
- the packet counters (agg_stats, agg_rejects, atp_stats) after every packet.
BMv2 is one simple_switch for many sequences (FencedBmv2: `reset_state` between them), and
its outputs for a packet are complete when a fence frame sent after it on the same port has
come out of every port (one ingress thread, FIFO egress queues per port), so there is no
waiting for quiet.

On a divergence, `write_vector` saves the sequence up to the packet that diverged as a
vector file whose expectations are BMv2's, and the AssertionError names it; replay it with
`agglab vectors run FILE --target soft` (or bmv2). Decide from docs/design/ which side
is wrong before keeping it in p4src/vectors/.
"""

from __future__ import annotations

import hashlib
import select
import time
from pathlib import Path

import numpy as np
import yaml

from agglab.testkit.bmv2_target import THRIFT_PORT
from agglab.testkit.frames import build, describe, first_difference
from agglab.testkit.netns import inside
from agglab.testkit.seqgen import PORTS, Sequence
from agglab.testkit.vectors import counter_names
from agglab.controller.bmv2_client import Bmv2Client

COUNTERS = counter_names()         # the P4 program's counters (every scheme's): agg_stats, agg_rejects, atp_stats
FENCE_NET = "10.250.0."            # fence frames go to FENCE_NET<port>: no sequence uses that net


class Divergence(AssertionError):
    pass


def fence_frame(port: int, serial: int) -> bytes:
    """A plain IPv4 frame (protocol 253, experimental) the fence routes send out of `port`."""
    return build({"from": "h9", "ip": {"dst": f"{FENCE_NET}{port}", "proto": 253, "id": serial & 0xFFFF},
                  "payload": "fe"})


class FencedBmv2:
    """A started Bmv2Target's simple_switch, driven through a Bmv2Client in its namespace."""

    def __init__(self, target, ports=PORTS):
        self.target, self.ports = target, tuple(ports)
        target.reset(set(self.ports))                    # starts simple_switch
        with inside(target.ns.name):                     # the client's socket stays in the namespace
            self.client = Bmv2Client("difftest", THRIFT_PORT)
        self.serial = 0

    def reset(self, commands: list[str]) -> None:
        """BMv2's reset_state (tables, registers, counters, multicast), then the sequence's
        configuration and the fence routes."""
        fences = [f"table_add ipv4_lpm ipv4_forward {FENCE_NET}{p}/32 => 02:00:00:00:00:0{p} {p}"
                  for p in self.ports]
        self.client.commands(["reset_state"] + commands + fences)
        stray = self.target._drain()
        assert not stray, f"frames nobody asked for: {stray}"

    def inject(self, port: int, frame: bytes, timeout: float = 20.0) -> list[tuple[int, bytes]]:
        """Everything simple_switch emits for `frame`: sent on `port`, then one fence per port."""
        socks = self.target.socks
        self.serial += 1
        fences = {p: fence_frame(p, self.serial) for p in self.ports}
        socks[port].send(frame)
        for f in fences.values():
            socks[port].send(f)
        missing, got = set(self.ports), []
        by_fd = {s.fileno(): p for p, s in socks.items()}
        deadline = time.monotonic() + timeout
        while missing:
            left = deadline - time.monotonic()
            if left <= 0:
                raise Divergence(f"BMv2 sent no fence out of port(s) {sorted(missing)} in {timeout} s "
                                 f"(simple_switch log: {self.target.log})")
            ready, _, _ = select.select(list(socks.values()), [], [], left)
            for s in ready:
                p = by_fd[s.fileno()]
                for data in self.target._incoming(s):
                    if p in missing and _is_fence(data, fences[p]):
                        missing.discard(p)
                    else:
                        got.append((p, data))
        return got

    def read(self, cells: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return {name: np.array(self.client.register_read_ranges(name, [(int(i), 1) for i in idx]),
                               dtype=np.uint64).reshape(-1) for name, idx in cells.items() if len(idx)}

    def read_all(self, names) -> dict[str, np.ndarray]:
        return {name: np.array(self.client.register_read(name), dtype=np.uint64) for name in names}

    def counters(self, sizes: dict[str, int]) -> dict[str, np.ndarray]:
        return {name: np.array([self.client.counter_read(name, i) for i in range(n)], dtype=np.uint64)
                for name, n in sizes.items()}

    def close(self) -> None:
        self.client.close()


def _is_fence(data: bytes, fence: bytes) -> bool:
    """The fence as it leaves (TTL one less, checksum recomputed, destination MAC set): same
    length, same IPv4 identification and destination."""
    return len(data) == len(fence) and data[18:20] == fence[18:20] and data[30:34] == fence[30:34]


def reset_twin(pipeline, commands: list[str]) -> None:
    pipeline.reset_state()
    for line in commands:
        pipeline.command(line)


def _show(frames) -> str:
    return "\n".join(f"    port {p}: {describe(f)}" for p, f in frames) or "    (nothing)"


def _cells_text(bad: dict[str, list[tuple[int, int, int]]]) -> str:
    items = [f"{name}[{i}] twin {t}, BMv2 {b}" for name, rows in bad.items() for i, t, b in rows]
    return "; ".join(items[:6]) + (f"; and {len(items) - 6} more" if len(items) > 6 else "")


def _differing(twin: dict[str, np.ndarray], cells: dict[str, np.ndarray], got: dict[str, np.ndarray]):
    bad = {}
    for name, idx in cells.items():
        if not len(idx):
            continue
        t = twin[name][idx].astype(np.uint64)
        rows = [(int(i), int(a), int(b)) for i, a, b in zip(idx, t, got[name]) if a != b]
        if rows:
            bad[name] = rows
    return bad


def run_pair(seq: Sequence, twin, bmv2: FencedBmv2, out_dir: Path) -> int:
    """Run `seq` on both; raise Divergence (naming the vector file written) at the first
    difference. Returns the number of packets compared."""
    frames = [(port, build(spec)) for port, spec in seq.packets]
    reset_twin(twin, seq.commands)
    bmv2.reset(seq.commands)
    touched = {name: np.zeros(len(a), bool) for name, a in twin.registers.items()}
    sizes = {name: len(twin.counters[name]) for name in COUNTERS}
    history: list[list[tuple[int, bytes]]] = []
    for n, (port, frame) in enumerate(frames, start=1):
        before = {name: a.copy() for name, a in twin.registers.items()}
        want = sorted(twin.process(port, frame))
        got = sorted(bmv2.inject(port, frame))
        history.append(got)
        for name, a in twin.registers.items():
            touched[name] |= a != before[name]
        problem = None
        if want != got:
            problem = (f"packet {n} on port {port}: twin and BMv2 emit differently: "
                       f"{first_difference(got, want).replace('expected', 'BMv2').replace('got', 'twin')}\n"
                       f"  sent:\n{_show([(port, frame)])}\n  BMv2:\n{_show(got)}\n  twin:\n{_show(want)}")
        else:
            cells = {name: np.flatnonzero(t) for name, t in touched.items()}
            bad = _differing(twin.registers, cells, bmv2.read(cells))
            if not bad and n == len(frames):
                everything = {name: np.arange(len(a)) for name, a in twin.registers.items()}
                bad = _differing(twin.registers, everything, bmv2.read_all(twin.registers))
            if bad:
                problem = f"after packet {n} on port {port}: registers differ: {_cells_text(bad)}"
                for name, rows in bad.items():          # the vector must hold them, touched or not
                    touched[name][[i for i, _, _ in rows]] = True
            else:
                ctr = bmv2.counters(sizes)
                cbad = _differing(twin.counters, {k: np.arange(v) for k, v in sizes.items()}, ctr)
                if cbad:
                    problem = f"after packet {n} on port {port}: counters differ: {_cells_text(cbad)}"
        if problem:
            path = write_vector(seq, frames[:n], history, bmv2, touched, twin.counters, out_dir, problem)
            raise Divergence(f"{seq.scheme} sequence ({seq.scenario} scenario), {problem}\n"
                             f"  vector written: {path}\n  replay: agglab vectors run {path} --target soft")
    return len(frames)


def _flow(value) -> str:
    return yaml.safe_dump(value, default_flow_style=True, sort_keys=False, width=1 << 20).strip()


def write_vector(seq: Sequence, frames, history, bmv2: FencedBmv2, touched, twin_counters, out_dir: Path,
                 problem: str) -> Path:
    """The sequence up to the diverging packet as a conformance vector with BMv2's outputs and
    state as its expectations: `agglab vectors run FILE --target soft` then fails where the twin
    differs (--target bmv2 passes, unless BMv2 is not deterministic there). Registers: the cells
    the twin touched and those found different; counters: every cell either side counted in."""
    cells = {name: np.flatnonzero(t) for name, t in touched.items()}
    regs = bmv2.read(cells)
    ctrs = bmv2.counters({name: len(twin_counters[name]) for name in COUNTERS})
    head = {"description": (f"Found by the differential test (tests/test_difftest.py), {seq.scheme} sequence, "
                            f"{seq.scenario} scenario: {problem.splitlines()[0]}. The expectations are what "
                            f"BMv2 emitted and stored; decide from docs/design/ which side is right "
                            f"before keeping this file in p4src/vectors/."),
            "commands": seq.commands}
    lines = [yaml.safe_dump(head, sort_keys=False, width=100).rstrip(), "packets:"]
    for (port, spec), out in zip(seq.packets[:len(frames)], history):
        lines += [f"  - port: {port}", f"    frame: {_flow(spec)}", "    expect:" + ("" if out else " []")]
        for p, f in out:
            lines += [f"      # {describe(f)}", f"      - {{port: {p}, frame: {{raw: \"{f.hex()}\"}}}}"]
    lines.append("registers:" + ("" if any(len(i) for i in cells.values()) else " {}"))
    lines += [f"  {name}[{i}]: {int(v)}" for name, idx in cells.items() if len(idx) for i, v in zip(idx, regs[name])]
    counted = [(name, i, int(v)) for name, vals in ctrs.items() for i, v in enumerate(vals)
               if v or twin_counters[name][i]]
    lines.append("counters:" + ("" if counted else " {}"))
    lines += [f"  {name}[{i}]: {v}" for name, i, v in counted]
    text = "\n".join(lines) + "\n"
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"diff_{seq.scheme}_{hashlib.sha1(text.encode()).hexdigest()[:8]}.yaml"
    path.write_text(text)
    return path


def run_batched(seq: Sequence, single, batched, max_batch: int = 16) -> int:
    """`seq` through `single` (Pipeline.process per frame) and `batched` (Pipeline.process_batch
    on every run of consecutive frames from one port, per frame where it declines, as the
    daemon does): the same frames per egress port in the same order, equal registers and
    counters after every batch. Returns the number of batches the fast path took."""
    reset_twin(single, seq.commands)
    reset_twin(batched, seq.commands)
    frames = [(port, build(spec)) for port, spec in seq.packets]
    taken, i = 0, 0
    while i < len(frames):
        port = frames[i][0]
        j = i
        while j < len(frames) and frames[j][0] == port and j - i < max_batch:
            j += 1
        chunk = [f for _, f in frames[i:j]]
        want = _by_port(out for f in chunk for out in single.process(port, f))
        rows = np.zeros((len(chunk), 2048), np.uint8)
        for k, f in enumerate(chunk):
            rows[k, :len(f)] = np.frombuffer(f, np.uint8)
        res = batched.process_batch(port, rows, np.array([len(f) for f in chunk], np.uint32))
        if res is None:
            got = _by_port(out for f in chunk for out in batched.process(port, f))
        else:
            taken += 1
            got = _by_port((p, bytes(row)) for p, block in res[0] for row in block)
        where = f"{seq.scheme} sequence, frames {i + 1}-{j} from port {port} ({'batched' if res else 'declined'})"
        assert got == want, f"{where}: outputs differ:\n  single: {want}\n  batched: {got}"
        for name, a in single.registers.items():
            diff = np.flatnonzero(a != batched.registers[name])
            assert not len(diff), f"{where}: {name}{diff[:5].tolist()} per frame {a[diff[:5]].tolist()}, " \
                                  f"batched {batched.registers[name][diff[:5]].tolist()}"
        for name, c in single.counters.items():
            assert (c == batched.counters[name]).all(), f"{where}: counter {name}: {c}, batched {batched.counters[name]}"
        i = j
    return taken


def _by_port(outs) -> dict[int, list[bytes]]:
    got: dict[int, list[bytes]] = {}
    for p, f in outs:
        got.setdefault(p, []).append(bytes(f))
    return got
