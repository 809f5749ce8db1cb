"""Sparse (OmniReduce) against dense (SwitchML) on the same network and data.

Links are shaped with tc htb (default 5 Mb/s) so the network, not the Python switch,
is the bottleneck; each worker's data is the same block-sparse gradient for both
pipelines (the dense pipeline sends its zero blocks too). With the `overlap` pattern the
non-zero blocks coincide across workers, so the ideal speedup is 1/density; with
`random` the results (multicast for every block any worker has) bound it by the union.
"""

from __future__ import annotations

import argparse
import sys

from emulation.session import run_allreduce

DENSITIES = (1.0, 0.5, 0.2, 0.1, 0.05, 0.01)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", type=int, default=8)
    ap.add_argument("--elements", type=int, default=262_144)
    ap.add_argument("--bw", type=float, default=5.0, help="Mb/s per link")
    ap.add_argument("--pattern", default="overlap", choices=["overlap", "random", "disjoint"])
    args = ap.parse_args(argv)
    common = dict(workers=args.workers, elements=args.elements, bw=args.bw, pattern=args.pattern)
    print(f"{args.workers} workers x {args.elements} int32, links {args.bw} Mb/s, pattern {args.pattern}")
    print(f"{'density':>8} {'dense s':>9} {'sparse s':>9} {'speedup':>8} {'ideal':>7} {'blocks sent':>12} exact")
    for d in DENSITIES:
        dense = run_allreduce(algorithm="switchml", density=d, **common)     # same data, dense pipeline
        sparse = run_allreduce(algorithm="omnireduce", density=d, **common)
        ok = dense["exact"] and sparse["exact"]
        if not ok:
            print(f"{d:>8} failed: {dense.get('errors') or sparse.get('errors')}")
            continue
        print(f"{d:>8} {dense['seconds']:>9.3f} {sparse['seconds']:>9.3f} "
              f"{dense['seconds'] / sparse['seconds']:>7.2f}x {1 / d:>6.1f}x {sparse['blocks_sent']:>12} {ok}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
