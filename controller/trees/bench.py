"""Tree computation time: `python -m agglab.controller.trees.bench [--repeats N] [--json]`.

Why measure it: after a link failure the controller recomputes the trees before it can
install new entries, so this time is part of the reroute latency (target: under 50 ms from link down to new trees)
(fat-tree k=4, 8, 16 with 16 workers spread over racks and pods; k=4 is then all hosts).
BML's schedule is timed on BCube, the only topology it runs on. Prints the median
wall-clock time per tree algorithm; the graph build is not included.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

from agglab.controller.topologies import bcube, fat_tree
from agglab.controller.trees import compute

CASES = [("fattree k=4", lambda: fat_tree(4, bw=100, workers=16)),
         ("fattree k=8", lambda: fat_tree(8, bw=100, workers=16)),
         ("fattree k=16", lambda: fat_tree(16, bw=100, workers=16))]
BML_CASES = [("bcube n=3 k=1", lambda: bcube(3, 1)), ("bcube n=4 k=2", lambda: bcube(4, 2))]


def measure(algo: str, graph, repeats: int) -> tuple[float, int]:
    times, trees = [], 0
    for _ in range(repeats):
        start = time.perf_counter()
        ts = compute(algo, graph)
        times.append(time.perf_counter() - start)
        trees = len(ts.trees)
    return statistics.median(times) * 1e3, trees


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", action="store_true", help="one JSON object per line")
    args = ap.parse_args(argv)
    rows = []
    for label, make in CASES:
        g = make()
        for algo in ("spt", "rat", "packing"):
            ms, trees = measure(algo, g, args.repeats)
            rows.append({"topology": label, "workers": 16, "tree": algo, "ms": ms, "trees": trees})
    for label, make in BML_CASES:
        g = make()
        ms, trees = measure("bml", g, args.repeats)
        rows.append({"topology": label, "workers": len([n for n in g if g.nodes[n]["kind"] == "host"]),
                     "tree": "bml", "ms": ms, "trees": trees})
    if args.json:
        for row in rows:
            print(json.dumps(row))
        return 0
    print(f"{'topology':<16}{'workers':>8}  {'tree':<10}{'ms':>10}{'trees':>7}")
    for r in rows:
        print(f"{r['topology']:<16}{r['workers']:>8}  {r['tree']:<10}{r['ms']:>10.1f}{r['trees']:>7}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
