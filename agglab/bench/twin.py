"""The `pipeline` and `daemon` sections: the software twin's own speed, with no network.

Why apart from the network sections: these measure the switch alone (the pipeline in-process,
the daemon on unshaped veths), so they tell whether a slow allreduce is the switch's CPU or the
emulated links; `pipeline` needs neither root nor Mininet.
"""

from __future__ import annotations

from agglab.bench.figures import figure


def bench_pipeline(_a) -> list[dict]:
    from agglab.softswitch import bench_pipeline  # lazy: loads numpy, only bench_pipeline() needs it

    scale = "8 workers x 256 slots x 20 rounds, one core"
    return [figure("pipeline dense", bench_pipeline.run(8, 256, 20), "packets/s", scale=scale,
                   link_bound=False, links="in-process, no links"),
            figure("pipeline sparse (density 0.2)", bench_pipeline.run(8, 256, 20, density=0.2),
                   "packets/s", scale=scale, link_bound=False, links="in-process, no links")]


def bench_daemon(a) -> list[dict]:
    from agglab.softswitch import bench_io  # lazy: loads numpy, only bench_daemon() needs it

    out = []
    for sched in ("batch", "normal"):
        opts = bench_io.options(["--seconds", str(a.daemon_seconds), "--sender-sched", sched])
        r = bench_io.run("agg", opts)
        main = sched == "batch"       # the target's figure: senders that never preempt the daemon
        out.append(figure("daemon frames/s in, 8-way aggregation" + ("" if main else ", senders SCHED_OTHER"),
                          r["rx_pps"], "frames/s",
                          target=">= 150,000 (3x the ~50,000 measured at the start)" if main else None,
                          met=r["rx_pps"] >= 150_000 if main else None,
                          link_mbps=None, scale=f"8 workers x window {opts.window} on unshaped veths",
                          link_bound=False, frames_out_per_s=round(r["tx_pps"]),
                          detail=f"daemon CPU {r['daemon_cpu']:.0%} (kernel {r['daemon_sys']:.0%}), "
                                 f"senders SCHED_{'BATCH' if main else 'OTHER'}",
                          daemon_cpu=round(r["daemon_cpu"], 3), daemon_kernel_cpu=round(r["daemon_sys"], 3),
                          retransmissions=r["retx"], wrong_results=r["bad"]))
    return out

