"""`make bench`: speed figures, printed (not asserted).

1. packets/s of the software switch's aggregation pipeline (in-process, one core);
2. packets/s through the software switch daemon on real veth interfaces, and the same
   aggregation load on BMv2 simple_switch beside it when BMv2 and p4c are installed;
3. end-to-end goodput of an 8-worker allreduce of 1M int32 per worker in Mininet;
4. tree computation time (spt, rat, packing) on fat-trees k=4, 8, 16;
5. reroute time on a k=4 fat-tree: link down → detected → recomputed → installed;
6. sparse against dense completion time for densities 1.0 … 0.01 (agglab/bench_sparse.py).
"""

from __future__ import annotations

import os
import subprocess
import sys

from ground.paths import REPO


def _section(title: str) -> None:
    print(f"\n== {title}", flush=True)


def main() -> int:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    _section("software switch pipeline (in-process)")
    subprocess.run([sys.executable, "-m", "softswitch.bench_pipeline"], cwd=REPO, env=env)
    if os.geteuid() == 0:
        _section("software switch daemon (raw sockets on veths)")
        subprocess.run([sys.executable, "-m", "softswitch.bench_io"], cwd=REPO, env=env)
        from controller.switch_client import find_bmv2_tool

        if find_bmv2_tool("simple_switch") and find_bmv2_tool("p4c"):
            _section("aggregation pipeline, BMv2 beside the software switch (same packets, same program)")
            subprocess.run([sys.executable, "-m", "agglab.bench_bmv2"], cwd=REPO, env=env)
        else:
            print("\n(no simple_switch/p4c: skipping the BMv2 pipeline figure)")
        _section("8-worker allreduce, 1M int32 per worker, one software switch in Mininet")
        from emulation.session import run_allreduce

        for elements in (1_000_000,):
            r = run_allreduce(workers=8, elements=elements, dtype="int32")
            print(f"workers=8 elements={elements}: exact={r['exact']} seconds={r['seconds']} "
                  f"goodput={r['goodput_mbps']} Mb/s per worker, aggregate "
                  f"{r['goodput_mbps'] * 8:.1f} Mb/s, packets={r['packets']}, "
                  f"retransmissions={r['retransmissions']}")
    _section("tree computation (ms)")
    subprocess.run([sys.executable, "-m", "controller.trees.bench"], cwd=REPO, env=env)
    if os.geteuid() == 0:
        _section("reroute on a k=4 fat-tree, 8 workers (link of the active tree fails at 50%)")
        from emulation.session import run_allreduce

        for tree in ("spt", "rat", "packing"):
            r = run_allreduce(topology="fattree", k=4, workers=8, elements=200_000, tree=tree, fail=["tree@0.5"])
            for f in r["failures"]:
                print(f"{tree:8s} exact={r['exact']} link={f['link']} detect={f['detect_ms']} ms "
                      f"recompute={f['recompute_ms']} ms install={f['install_ms']} ms "
                      f"(freeze {f.get('freeze_ms')} / snapshot {f.get('snapshot_ms')} / entries "
                      f"{f.get('entries_ms')} / preload {f.get('preload_ms')} ms)")
        _section("sparse (OmniReduce) against dense (SwitchML), same data, rate-limited links")
        subprocess.run([sys.executable, "-m", "agglab.bench_sparse"], cwd=REPO, env=env)
    else:
        print("\n(not root: skipping the daemon and Mininet benchmarks)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
