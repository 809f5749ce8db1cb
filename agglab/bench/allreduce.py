"""The `wire`, `wide` and `sparse` sections: allreduce time on one switch against the links' wire time.

Why together: each runs whole allreduces on shaped links and judges them by what the wire
allows (`dense_link_seconds`, and for sparse runs the frames the protocol must send,
`sparse_ceiling`), so a figure says whether the emulation was link-bound and, if not, where
the time went.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from agglab.bench.figures import LINK_BOUND, figure
from agglab.emulation.fidelity import dense_link_seconds
from agglab.ground import lifeline, wire
from agglab.ground.runspec import RunSpec
from agglab.hosts.gradients import gradient_for
from agglab.hosts.sparse_agent import DEFAULT_LOOKAHEAD
from agglab.hosts.sparse_blocks import announcements, nonzero_kblocks, sent_blocks
from agglab.ground.paths import IMPORT_ROOT


def _checked(r: dict) -> dict:
    """A run's result, or the reason it has no figures (its workers' first errors)."""
    if r.get("seconds") is None:
        raise RuntimeError("the run failed: " + "; ".join((r.get("errors") or ["no result"])[:3]))
    return r


def _where_time_went(r: dict) -> str:
    """The run's bottleneck link and CPU use, from its fidelity record and worker reports."""
    f = r.get("fidelity") or {}
    link = f.get("link") or {}
    busy = f"bottleneck {link['link']} {link['utilisation']:.0%} busy, " if link.get("utilisation") is not None else ""
    switches = ", ".join(f"{name} {cpu:.0%}" for name, cpu in (f.get("switch_cpu") or {}).items())
    return (f"{busy}{r['retransmissions']} resends, workers {r.get('worker_cpu_s')} CPU-s, "
            f"switch CPU {switches or '?'}, machine {f.get('machine_busy', 0):.0%} busy")


def bench_wire(a) -> list[dict]:
    from agglab.emulation.session import run_allreduce  # lazy: loads networkx, PyYAML, pyroute2, only bench_wire() needs it

    out = []
    wide = wire.WIDE                              # the optional variant: informational, no target
    for mbps in a.rates:
        r = _checked(run_allreduce(workers=8, elements=a.elements, dtype="int32", bw=mbps))
        ideal = dense_link_seconds(a.elements, mbps)
        ratio = r["seconds"] / ideal
        at_target = mbps == 20 and not wide
        out.append(figure(f"8 x {a.elements:,} int32 at {mbps:g} Mb/s" + (f", K={wire.K}" if wide else ""),
                          r["seconds"], "s",
                          target="<= 1.10x analytic" if at_target else None,
                          met=ratio <= LINK_BOUND if at_target else None, link_mbps=mbps,
                          scale=f"8 workers x {a.elements:,} int32, one switch, {wire.K} per packet",
                          link_bound=ratio <= LINK_BOUND, analytic_s=round(ideal, 3),
                          detail=f"{ratio:.2f}x the analytic {ideal:.2f} s, exact={r['exact']}, "
                                 f"{_where_time_went(r)}",
                          x_analytic=round(ratio, 3), exact=r["exact"],
                          retransmissions=r["retransmissions"], worker_cpu_s=r.get("worker_cpu_s"),
                          fidelity=r.get("fidelity")))
    return out


def bench_wide(a) -> list[dict]:
    """The wire figures again in the wide program variant (AGGLAB_K=256: 4x fewer, 1082-byte
    frames for the same bytes), in a child bench: K is fixed per process."""
    rates = ",".join(f"{r:g}" for r in a.wide_rates)
    with tempfile.TemporaryDirectory(prefix="agglab-bench-wide-") as tmp:
        out = Path(tmp) / "wide.json"
        proc = subprocess.run([sys.executable, "-m", "agglab.bench", "--only", "wire", "--rates", rates,
                               "--elements", str(a.elements), "--out", str(out)], cwd=IMPORT_ROOT,
                              env={**os.environ, "AGGLAB_K": str(wire.WIDE_K)},
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              preexec_fn=lifeline.preexec(bound_to_thread=True))
        if proc.returncode != 0 or not out.exists():
            raise RuntimeError(f"the AGGLAB_K={wire.WIDE_K} bench failed: {proc.stdout[-1500:]}")
        report = json.loads(out.read_text())
    if report["skipped"] or report["failed"]:
        raise RuntimeError(f"the AGGLAB_K={wire.WIDE_K} bench skipped {report['skipped']}, failed {report['failed']}")
    return report["figures"]


def sparse_ceiling(elements: int, density: float, pattern: str = "overlap",
                   window: int | None = None) -> tuple[float, int, int]:
    """What bounds the speed-up before any CPU does: frames per worker link, each way.
    Dense sends ceil(elements/K); sparse sends the dense lead round (one frame per slot, S),
    then the blocks of hosts/sparse_blocks.sent_blocks (the announced non-zero blocks and
    look-ahead blocks; the first of each column is announced in the lead), and receives one
    result per round (with `overlap` every worker's blocks are the same: rounds = its sends).
    Returns (ceiling, sparse frames, dense frames)."""
    spec = RunSpec(workers=8, elements=elements, algorithm="omnireduce", density=density, pattern=pattern,
                   window=window)
    S, blocks = spec.default_window(), -(-elements // wire.K)
    rows = np.zeros(blocks * wire.K, dtype=np.int64)
    rows[:elements] = gradient_for(spec, 0)
    mask = nonzero_kblocks(rows.reshape(blocks, wire.K), wire.K)
    frames = S + len(sent_blocks(mask, announcements(mask, min(S, blocks), DEFAULT_LOOKAHEAD), min(S, blocks)))
    return blocks / frames, frames, blocks


def bench_sparse(a) -> list[dict]:
    from agglab.emulation.session import run_allreduce  # lazy: loads networkx, PyYAML, pyroute2, only bench_sparse() needs it

    common = dict(workers=8, elements=a.elements, bw=5.0, pattern="overlap")
    dense = _checked(run_allreduce(algorithm="switchml", density=0.1, **common))   # dense time: density-free
    ideal = dense_link_seconds(a.elements, 5.0)
    out = []

    sparse_window = RunSpec(algorithm="omnireduce", elements=a.elements, window=a.sparse_window).default_window()
    for density, want in ((0.1, 9), (0.01, 50)):
        sparse = _checked(run_allreduce(algorithm="omnireduce", density=density, window=a.sparse_window, **common))
        speedup = dense["seconds"] / sparse["seconds"]
        ceiling, frames, blocks = sparse_ceiling(a.elements, density, window=a.sparse_window)
        sparse_wire = frames * wire.FRAME_BYTES * 8 / 5e6
        out.append(figure(f"sparse speed-up at density {density}", speedup, "x",
                          target=f">= {want}x (ideal {1 / density:g}x)", met=speedup >= want, link_mbps=5.0,
                          scale=f"8 workers x {a.elements:,} int32, one switch, overlapping blocks, "
                                f"sparse window {sparse_window}",
                          link_bound=dense["seconds"] <= LINK_BOUND * ideal,
                          dense_s=dense["seconds"], sparse_s=sparse["seconds"],
                          detail=f"dense {dense['seconds']} s, sparse {sparse['seconds']} s; protocol "
                                 f"ceiling {ceiling:.1f}x ({frames:,} frames per worker link each way "
                                 f"vs {blocks:,} dense); sparse {sparse['seconds'] / sparse_wire:.2f}x its "
                                 f"own wire time, {(sparse.get('fidelity') or {}).get('reason', '')}",
                          ceiling_x=round(ceiling, 2), sparse_frames=frames,
                          dense_x_analytic=round(dense["seconds"] / ideal, 3),
                          sparse_x_wire=round(sparse["seconds"] / sparse_wire, 3),
                          sparse_fidelity=sparse.get("fidelity"),
                          blocks_sent=sparse.get("blocks_sent"),
                          exact=dense["exact"] and sparse["exact"]))
    return out
