"""Hostile frames at a running switch while a job aggregates through it: the switch must reject each by its reason and the job stay exact.

    python -m agglab.emulation.fuzzing --frames 100000 [--rate 5000] [--workers 4] [--elements 200000]
                                [--bw MBPS] [--no-police] [--json]

The software switch (its port counters say how many frames it took); one switch, `workers` worker hosts h1..hW in a job, and one more host (the fuzzer, h<W+1>)
that is in no job. First the job runs alone (`--baseline` allreduces); then agglab.hosts.fuzz sends
`--frames` frames from the extra host while the job runs allreduce after allreduce until the
fuzzer is done. The report says whether every allreduce stayed exact, whether the switch
survived, the rejects the switch counted per reason against those the fuzzer expects, and the
switch's rate with and without the fuzz: the job's frames the switch took per second
(contributions / allreduce time) and, during the fuzz, all frames it took per second.

The fuzzer's port leads to a host in no job, so the session polices it (controller/policer.py):
frames over its meter are dropped first and counted as `policed`, and `during_vs_alone` is
the job's median rate under the fuzz over its best rate alone, both measured in this run.
With `police=False` the harness takes the policer off, so that every frame reaches the
pipeline and is counted by the reason the fuzzer built it for (`rejects_match`); with the
policer on, `rejects_match` holds when the frames that passed the meter were counted by
their reasons and the rest as policed, summing to the frames sent.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

from agglab.controller import policer
from agglab.controller.aggregate import read_rejects
from agglab.controller.switch_client import SoftSwitchClient
from agglab.emulation.session import Session
from agglab.ground import lifeline
from agglab.ground.paths import IMPORT_ROOT
from agglab.ground.runspec import RunSpec


def topology_file(workers: int, bw: float | None, directory: Path, fuzz_bw: float | None = None) -> tuple[Path, str]:
    """One switch, ranked workers h1..hW and an unranked host h<W+1>: (file, fuzzer host). The
    workers' links at `bw`, the fuzzer's at `fuzz_bw` (None: unshaped, a host with a faster
    NIC than the job's: a flood that a shaped link would hold back reaches the switch)."""
    fuzzer = f"h{workers + 1}"
    hosts = [f"    - {{name: h{i + 1}, rank: {i}}}" for i in range(workers)] + [f"    - {fuzzer}"]
    rate = "null" if bw is None else bw
    links = [f"  - [h{i + 1}, s1, {rate}]" for i in range(workers)] + [
        f"  - [{fuzzer}, s1, {'null' if fuzz_bw is None else fuzz_bw}]"]
    path = directory / f"fuzz-{workers}.yaml"
    path.write_text("name: fuzz\nnodes:\n  switches: [s1]\n  hosts:\n" + "\n".join(hosts)
                    + "\nlinks:\n" + "\n".join(links) + "\n")
    return path, fuzzer


def _frames_in(client) -> dict[int, int]:
    return {int(p): s["rx"] for p, s in json.loads(client.command("port_stats")).items() if p.isdigit()}


def run(frames: int, rate: float | None = None, workers: int = 4, elements: int = 200_000,
        bw: float | None = None, baseline: int = 2, seed: int = 0,
        quiet: bool = True, police: bool = True) -> dict:
    with tempfile.TemporaryDirectory(prefix="agglab-fuzz-") as tmp:
        topo, fuzz_host = topology_file(workers, bw, Path(tmp))
        spec = RunSpec(workers=workers, elements=elements, topology=str(topo), backend="soft", seed=seed,
                       bw=bw).validate()
        with Session(spec, quiet=quiet) as session:
            if not police:
                policer.unpolice(session.net.client("s1"))
            return _measure(session, fuzz_host, frames, rate, baseline, seed, quiet)


def _measure(session: Session, fuzz_host: str, frames: int, rate, baseline: int, seed: int, quiet: bool) -> dict:
    client = session.net.client("s1")
    fuzz_port = session.g.edges[fuzz_host, "s1"]["ports"]["s1"]

    def job_rate(r: dict) -> float:
        return r["switch"]["contributions"] / r["seconds"]

    def _all_rate(r: dict) -> float:     # every frame into the switch: the job's W per contribution round trip
        return r["packets"] / r["seconds"]

    def timed() -> dict:
        t0 = time.time()
        r = session.allreduce()
        r["span"] = (t0, time.time())
        return r

    alone = [timed() for _ in range(baseline)]
    rejects0, rx0 = read_rejects(client), _frames_in(client)
    samples: list[tuple[float, int]] = []          # (time, frames the switch received so far)
    stop = threading.Event()

    own = SoftSwitchClient("s1", str(session.net.net.get("s1").control_path))   # the job's is not shared

    def sample() -> None:
        while not stop.is_set():
            samples.append((time.time(), sum(_frames_in(own).values())))
            stop.wait(0.25)
    out = Path(session.net.run.path) / "fuzz.json"
    argv = [sys.executable, "-m", "agglab.hosts.fuzz", "--iface", f"{fuzz_host}-eth0", "--frames", str(frames),
            "--seed", str(seed), "--job", str(session.spec.job), "--epoch", str(session.job.trees().epoch),
            "--json"] + (["--rate", str(rate)] if rate else [])
    log = open(out, "wb")
    proc = session.net.host(fuzz_host).popen(argv, stdout=log, stderr=log, cwd=str(IMPORT_ROOT),
                                             env=dict(os.environ, PYTHONPATH=str(IMPORT_ROOT)),
                                             preexec_fn=lifeline.preexec(bound_to_thread=True))   # waited for here
    session.net.run.add_pid(proc.pid, f"fuzzer on {fuzz_host}")
    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    runs = []
    try:
        while proc.poll() is None or not runs:
            runs.append(timed())
    finally:
        proc.wait(timeout=600)
        log.close()
        stop.set()
        sampler.join(2)
    time.sleep(0.5)                          # the switch drains what is still queued
    session.net.check_switches()             # raises if the switch died
    rx1 = _frames_in(client)
    rejects = {k: v - rejects0.get(k, 0) for k, v in read_rejects(client).items()}
    lines = out.read_text(errors="replace").strip().splitlines()
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"the fuzzer exited with {proc.returncode}: {' | '.join(lines[-5:])}")
    report = json.loads(lines[-1])
    t0, t1 = report["send_started"], report["send_ended"]
    during = [r for r in runs if r["span"][0] < t1 and r["span"][1] > t0]      # overlapping the sending
    inside = [(t, n) for t, n in samples if t0 <= t <= t1]
    expected = {f"rejected_{k}": v for k, v in report["expected_rejects"].items()}
    got = {k: v for k, v in rejects.items() if v}
    policed = got.get("rejected_policed", 0)
    # every frame counted once: by its own reason if it passed the meter, else as policed
    # (what the kernel dropped before the switch read it, at an unpaced fuzzer's rate, is in
    # neither: the port's receive counter is the reference)
    rx = rx1.get(fuzz_port, 0) - rx0.get(fuzz_port, 0)
    match = got == expected if not policed else (
        sum(got.values()) == rx and all(got.get(k, 0) <= v for k, v in expected.items()))
    # the job alone: its median allreduce's rate; under the fuzz: every contribution of the
    # allreduces that overlapped the sending over their seconds together (one short allreduce
    # that missed most of the flood does not stand for the rest)
    alone_rate = sorted(job_rate(r) for r in alone)[len(alone) // 2]
    under = (sum(r["switch"]["contributions"] for r in during) / sum(r["seconds"] for r in during)
             if during else None)
    return {
        "frames": frames, "fuzzer": report, "switch_alive": True,
        "rejects": got, "expected_rejects": expected, "rejects_match": match, "policed": policed,
        "during_vs_alone": round(under / alone_rate, 3) if under else None,
        "fuzz_port_rx": rx1.get(fuzz_port, 0) - rx0.get(fuzz_port, 0),
        "alone": {"exact": all(r["exact"] for r in alone), "seconds": [r["seconds"] for r in alone],
                  "job_frames_per_s": round(max(job_rate(r) for r in alone))},
        "alone_all_frames_per_s": round(max(_all_rate(r) for r in alone)),
        "during": {"exact": all(r["exact"] for r in runs), "allreduces": len(during), "allreduces_in_all": len(runs),
                   "seconds": [r["seconds"] for r in during],
                   "job_frames_per_s": round(min(job_rate(r) for r in during)) if during else None,
                   "job_frames_per_s_median": round(sorted(job_rate(r) for r in during)[len(during) // 2])
                   if during else None,
                   "all_frames_per_s": round((inside[-1][1] - inside[0][1]) / (inside[-1][0] - inside[0][0]))
                   if len(inside) > 1 else None,
                   "fuzz_seconds": round(t1 - t0, 3)},
        "link_mbps": session.spec.bw, "workers": session.spec.workers, "elements": session.spec.elements,
        "errors": [e for r in alone + runs for e in r.get("errors", [])],
    }


def _counts(counts) -> str:
    """{'rejected_length': 3, 'rejected_malformed': 2} -> 'length 3, malformed 2' (for people)."""
    if not isinstance(counts, dict):
        return str(counts)
    return ", ".join(f"{k.removeprefix('rejected_')} {v:,}" for k, v in sorted(counts.items())) or "none"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m agglab.emulation.fuzzing", description=__doc__.splitlines()[0])
    ap.add_argument("--frames", type=int, default=100_000)
    ap.add_argument("--rate", type=float, default=None, help="fuzz frames per second (default: as fast as it can)")
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--elements", type=int, default=200_000)
    ap.add_argument("--bw", type=float, default=None, help="link rate in Mb/s (default unshaped)")
    ap.add_argument("--baseline", type=int, default=2, help="allreduces of the job alone first")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-police", action="store_true",
                    help="take the policer off the fuzzer's port (every frame reaches the pipeline)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    if args.frames < 1 or args.workers < 1 or args.elements < 1:
        print("agglab.emulation.fuzzing: --frames, --workers and --elements must be positive", file=sys.stderr)
        return 2
    r = run(args.frames, args.rate, args.workers, args.elements, args.bw, args.baseline,
            args.seed, quiet=args.json, police=not args.no_police)
    if args.json:
        print(json.dumps(r, sort_keys=True))
    else:
        f = r["fuzzer"]
        print(f"fuzz: {f['sent']} frames in {f['seconds']} s ({f['rate_fps']} frames/s) from a host in no job; "
              f"kinds: {_counts(f['kinds'])}")
        print(f"switch rejects: {_counts(r['rejects'])} (expected: {_counts(r['expected_rejects'])}: "
              f"{'match' if r['rejects_match'] else 'MISMATCH'}); fuzz port received {r['fuzz_port_rx']}")
        a, d = r["alone"], r["during"]
        print(f"job alone: {a['job_frames_per_s']} job frames/s, {r['alone_all_frames_per_s']} frames/s into the "
              f"switch ({'exact' if a['exact'] else 'NOT EXACT'}, {a['seconds']} s); during the {d['fuzz_seconds']} s "
              f"of fuzz: {d['job_frames_per_s']} job frames/s at worst, {d['job_frames_per_s_median']} median, over "
              f"{d['allreduces']} allreduces ({'exact' if d['exact'] else 'NOT EXACT'}), {d['all_frames_per_s']} "
              f"frames/s into the switch in all; links {r['link_mbps'] or 'unshaped'} Mb/s")
        print(f"policed {r['policed']} frames; the job's rate under the fuzz / alone: {r['during_vs_alone']}")
    return 0 if r["alone"]["exact"] and r["during"]["exact"] and r["rejects_match"] else 1


if __name__ == "__main__":
    sys.exit(main())
