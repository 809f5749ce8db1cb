"""`python -m agglab.softswitch.bench_pipeline`: aggregation packets/s through Pipeline.process.

Why this workload: it is what one switch sees in a SwitchML allreduce — 8
workers, a window of slots, every slot reused round after round with the
version flipping, each completion multicast to all 8 workers.  Frames are
built before the clock starts, so the figure is the pipeline alone (the
daemon's socket I/O is measured by agglab.softswitch.bench_io).

The sparse figure replays an OmniReduce allreduce on the same window: every
worker has a random set of non-zero blocks per slot column (`--density`);
round 0 of a column comes from everyone, later rounds only from the workers
whose next non-zero block it is, each announcing its following one.
"""

from __future__ import annotations

import argparse
import struct
import time

import numpy as np

from agglab.ground import wire
from agglab.softswitch.pipeline import Pipeline
from agglab.softswitch.star import star_commands



def worker_frame(worker: int, slot: int, ver: int, block: int, rng: np.random.Generator, data: bool = True,
                 **agg) -> bytes:
    """A worker's frame; data=False: agg_h only (a sparse ACK), lengths to match."""
    values = rng.integers(-2**20, 2**20, wire.K, dtype=np.int32).astype(">i4").tobytes() if data else b""
    agg.setdefault("exp", 130)
    payload = wire.pack_agg(job=1, ver=ver, slot=slot, worker=worker, block=block, **agg) + values
    udp = struct.pack("!HHHH", wire.UDP_PORT, wire.UDP_PORT, 8 + len(payload), 0)
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(udp) + len(payload), 0, 0x4000, 64, 17, 0,
                     bytes([10, 0, 0, worker + 1]), bytes([10, 255, 255, 254]))
    eth = bytes.fromhex("02a667fffffe") + bytes([2, 0, 0, 0, 0, worker + 1]) + b"\x08\x00"
    return eth + ip + udp + payload


def setup(pipeline: Pipeline, workers: int) -> None:
    for line in star_commands(workers, job=1):
        pipeline.command(line)


def sparse_frames(workers: int, slots: int, rounds: int, density: float,
                  rng: np.random.Generator) -> tuple[list[tuple[int, bytes]], int]:
    """(port, frame) of a sparse allreduce over `rounds` blocks per column, and the number of
    rounds (completions) it takes, in the order a lock-step run would send them."""
    sparse_flag, none = wire.CONST["AGG_FLAG_SPARSE"], wire.NEXT_NONE
    ack_flag = wire.CONST["AGG_FLAG_ACK"]
    columns = []
    for s in range(slots):
        nonzero = [[s + j * slots for j in range(1, rounds) if rng.random() < density] + [none]
                   for _ in range(workers)]
        columns.append((s, nonzero))
    frames, completions, r = [], 0, 0
    current = {s: s for s in range(slots)}               # round block of every unfinished column
    while current:
        for s, nonzero in columns:
            m = current.get(s)
            if m is None:
                continue
            for w, blocks in enumerate(nonzero):
                if r == 0 or blocks[0] == m:
                    if r:
                        blocks.pop(0)
                    frames.append((w + 1, worker_frame(w, s, r % 2, m, rng, flags=sparse_flag,
                                                       next_block=blocks[0])))
            completions += 1
            n = min(blocks[0] for blocks in nonzero)
            for w, blocks in enumerate(nonzero):           # ACK: accepted m, not sending n
                if n == none or blocks[0] != n:
                    frames.append((w + 1, worker_frame(w, s, r % 2, m, rng, data=False,
                                                       flags=sparse_flag | ack_flag, next_block=0)))
            if n == none:
                del current[s]
            else:
                current[s] = n
        r += 1
    return frames, completions


def run(workers: int = 8, slots: int = 256, rounds: int = 20, repeat: int = 3,
        density: float | None = None) -> float:
    """Best packets/s over `repeat` runs of `rounds` x `slots` x `workers` packets (dense), or
    of a sparse allreduce of `rounds` blocks per column at `density`."""
    rng = np.random.default_rng(1)
    if density is None:
        frames = [(w + 1, worker_frame(w, s, r % 2, r * slots + s, rng))
                  for r in range(rounds) for s in range(slots) for w in range(workers)]
        completions = rounds * slots
    else:
        frames, completions = sparse_frames(workers, slots, rounds, density, rng)
    best = 0.0
    for _ in range(repeat):
        pipeline = Pipeline(seed=1)
        setup(pipeline, workers)
        process, emitted = pipeline.process, 0
        start = time.perf_counter()
        for port, frame in frames:
            emitted += len(process(port, frame))
        elapsed = time.perf_counter() - start
        assert emitted == completions * workers, f"expected {completions * workers} results, got {emitted}"
        best = max(best, len(frames) / elapsed)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", type=int, default=8)
    ap.add_argument("--slots", type=int, default=256)
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--density", type=float, default=0.2, help="sparse run: share of non-zero blocks")
    args = ap.parse_args()
    pps = run(args.workers, args.slots, args.rounds)
    print(f"softswitch pipeline: {pps:,.0f} agg packets/s "
          f"({args.workers} workers, {args.slots} slots, {args.rounds} rounds, K={wire.K})")
    pps = run(args.workers, args.slots, args.rounds, density=args.density)
    print(f"softswitch sparse pipeline: {pps:,.0f} agg packets/s "
          f"({args.workers} workers, {args.slots} slots, {args.rounds} blocks per column, "
          f"density {args.density}, K={wire.K})")


if __name__ == "__main__":
    main()
