"""Investigation harness (2026-12-07, eighth session; docs/measurements.md): the TCP baselines
with the software switch or a kernel bridge in the same place.

N hosts in scratch namespaces (softswitch/scratchnet.py) around one forwarder: the software
switch (ipv4_lpm entries, the coalescing wait the emulator gives it) or a Linux bridge; htb on
both ends of every link with the emulator's own lines (emulation/veths.py `htb_lines`), the
route's rto_min as emulation/host_setup.py sets it, optionally initcwnd/initrwnd or a
congestion control on that route. The workers (abworker.py) open the mesh, start together and
run hosts/ps.py or hosts/ring.py; the time is the last worker's end minus the first's start.
Per-link byte counters are sampled every 5 ms into OUT/run.json (abview.py prints them).
Root only; run it through /work/tools/heavy. Not a test, not part of the package."""
import argparse, json, subprocess, sys, time
from pathlib import Path
from agglab.softswitch.scratchnet import ScratchNet, sh
from agglab.softswitch.control import ControlClient
from agglab.emulation.veths import htb_lines
from agglab.ground import links
from agglab.ground.addresses import host_ip, host_mac

ap = argparse.ArgumentParser()
ap.add_argument("--fwd", choices=["soft", "bridge"], default="soft")
ap.add_argument("--algo", default="ps"); ap.add_argument("--n", type=int, default=8)
ap.add_argument("--bw", type=float, default=5.0); ap.add_argument("--elements", type=int, default=262144)
ap.add_argument("--coalesce", type=float, default=None, help="default: links.switch_coalesce")
ap.add_argument("--out", default="/tmp/tcp_ab"); ap.add_argument("--sample", type=float, default=0.005)
ap.add_argument("--tcp", action="store_true")
ap.add_argument("--initcwnd", type=int, default=0)
ap.add_argument("--congctl", default="")
ap.add_argument("--sysctl", action="append", default=[])
ap.add_argument("--extra", default="", help="extra switch args")
a = ap.parse_args()
out = Path(a.out); out.mkdir(parents=True, exist_ok=True)
py = sys.executable
with ScratchNet() as net:
    hosts = [net.add_host(i + 1) for i in range(a.n)]
    net.static_arp()
    rto = links.rto_min_ms(a.bw)
    for h in hosts:
        sh("ip", "link", "set", h.switch_if, "up")
        sh("ethtool", "-K", h.switch_if, "rx", "off", "tx", "off", "tso", "off", "gso", "off", "gro", "off", check=False)
        subprocess.run(["tc", "-batch", "-"], input="\n".join(htb_lines(h.switch_if, a.bw)) + "\n", text=True, check=True)
        subprocess.run(["ip", "netns", "exec", h.ns, "tc", "-batch", "-"], input="\n".join(htb_lines(h.ifname, a.bw)) + "\n", text=True, check=True)
        opts = (["rto_min", f"{rto}ms"] if rto > links.RTO_MIN_MS else []) + (["initcwnd", str(a.initcwnd), "initrwnd", str(a.initcwnd)] if a.initcwnd else []) + (["congctl", a.congctl] if a.congctl else [])
        if opts:
            sh("ip", "route", "replace", "10.0.0.0/8", "dev", h.ifname, "proto", "kernel", "scope", "link", "src", h.ip, *opts, ns=h.ns)
        for kv in a.sysctl:
            sh("sysctl", "-qw", kv, ns=h.ns)
    if a.fwd == "soft":
        co = links.switch_coalesce([a.bw] * a.n) if a.coalesce is None else a.coalesce
        extra = ["--coalesce", repr(co)] if co else []
        proc, paths = net.start_switch(out, *extra, *a.extra.split())
        deadline = time.monotonic() + 30
        while not Path(paths["control"]).exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.5)
        with ControlClient(paths["control"]) as c:
            for h in hosts:
                c.command(f"table_add ipv4_lpm ipv4_forward {h.ip}/32 => {h.mac} {h.port}")
        print("switch coalesce", co, flush=True)
    else:
        br = f"agbr{net.tag}"
        sh("ip", "link", "add", br, "type", "bridge")
        sh("ip", "link", "set", br, "up")
        for h in hosts:
            sh("ip", "link", "set", h.switch_if, "master", br)
        net.bridge = br
    t0 = time.monotonic() + 4.0 + 0.3 * a.n
    procs = [net.spawn([py, str(Path(__file__).with_name("abworker.py")), a.algo, str(i), str(a.n), str(a.elements), str(a.bw), repr(t0)],
                       ns=h.ns, stdout=subprocess.PIPE, text=True) for i, h in enumerate(hosts)]
    samples = []
    for p in procs:      # opened once the worker runs python (ip netns exec has entered the namespace)
        while b"abworker" not in open(f"/proc/{p.pid}/cmdline", "rb").read():
            time.sleep(0.01)
    tcpf = [open(f"/proc/{p.pid}/net/tcp", "rb", buffering=0) for p in procs]
    tcps = []
    def tx(ifn):
        return int(Path(f"/sys/class/net/{ifn}/statistics/tx_bytes").read_text())
    def rx(ifn):
        return int(Path(f"/sys/class/net/{ifn}/statistics/rx_bytes").read_text())
    while any(p.poll() is None for p in procs):
        # switch end rx = host uplink, tx = host downlink
        samples.append((time.monotonic(), [rx(h.switch_if) for h in hosts], [tx(h.switch_if) for h in hosts]))
        if a.tcp:
            tt = []
            for f in tcpf:
                f.seek(0); tt.append(f.read().decode())
            tcps.append(tt)
        time.sleep(a.sample)
    res = [json.loads(p.stdout.read().strip().splitlines()[-1]) for p in procs]
    if a.fwd == "bridge":
        sh("ip", "link", "del", br, check=False)
    json.dump({"args": vars(a), "results": res, "samples": samples, "tcp": tcps}, open(out / "run.json", "w"))
    secs = max(r["end"] for r in res) - min(r["start"] for r in res)
    print(json.dumps({"fwd": a.fwd, "algo": a.algo, "bw": a.bw, "elements": a.elements, "seconds": round(secs, 3),
                      "per_worker": [round(r["seconds"], 3) for r in res], "retrans": sum(r["retrans"] for r in res),
                      "ok": all(r["ok"] for r in res), "cc": sorted({r["cc"] for r in res})}))
