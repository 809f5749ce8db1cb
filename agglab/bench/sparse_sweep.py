"""Sparse (OmniReduce) against dense (SwitchML) on the same network and data, over densities.

`sudo .venv/bin/python -m agglab.bench.sparse_sweep [run options]` prints one row per density
(1 down to 0.01). Why beside `make bench`'s `sparse` section, which measures two densities
against their targets: this is the whole curve, for finding where sparse stops paying.

Links are shaped with tc htb (default 5 Mb/s) so the network, not the Python switch,
is the bottleneck; each worker's data is the same block-sparse gradient for both
pipelines (the dense pipeline sends its zero blocks too). With the `overlap` pattern the
non-zero blocks coincide across workers, so the ideal speedup is 1/density; with
`random` the results (multicast for every block any worker has) bound it by the union.
"""

from __future__ import annotations

import argparse
import sys

from agglab.run_options import add_run_options, spec_from_args
from agglab.emulation.session import run_spec

DENSITIES = (1.0, 0.5, 0.2, 0.1, 0.05, 0.01)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_run_options(ap, workers=8, elements=262_144, bw=5.0, pattern="overlap")
    base = spec_from_args(ap.parse_args(argv)).validate()
    print(f"{base.workers} workers x {base.elements} {base.dtype}, {base.topology}, links {base.bw} Mb/s, "
          f"pattern {base.pattern}")
    print(f"{'density':>8} {'dense s':>9} {'sparse s':>9} {'speedup':>8} {'ideal':>7} {'blocks sent':>12} exact")
    for d in DENSITIES:
        dense = run_spec(base.with_(algorithm="switchml", density=d))     # same data, dense pipeline
        sparse = run_spec(base.with_(algorithm="omnireduce", density=d))
        ok = dense["exact"] and sparse["exact"]
        if not ok:
            print(f"{d:>8} failed: {dense.get('errors') or sparse.get('errors')}")
            continue
        print(f"{d:>8} {dense['seconds']:>9.3f} {sparse['seconds']:>9.3f} "
              f"{dense['seconds'] / sparse['seconds']:>7.2f}x {1 / d:>6.1f}x {sparse['blocks_sent']:>12} {ok}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
