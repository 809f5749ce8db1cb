"""One PS/ring worker of scripts/tcp_ab/ab.py in its namespace: open the mesh, wait for the common start, allreduce, print a JSON line (time, resends, TcpExt counter changes, the congestion control used)."""
import json, sys, time
import numpy as np
from agglab.hosts import ps, ring
from agglab.hosts.tcp_mesh import open_mesh
from agglab.hosts.tcp_peer import hello_for
from agglab.hosts.mesh_allreduce import tcp_give_up

algo, rank, n, elements, mbps, t0 = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5]), float(sys.argv[6])
peers = [f"10.0.0.{i + 1}" for i in range(n)]
mod = ps if algo == "ps" else ring
arr = (np.arange(elements, dtype=np.int32) * (rank + 1))
out_to, in_from = mod.connections(rank, n)
mesh = open_mesh(hello_for(algo, arr, rank, n), peers, out_to, in_from, give_up=30, link_mbps=mbps)
while time.monotonic() < t0:
    time.sleep(0.001)
def ext():
    rows = [l.split() for l in open('/proc/net/netstat') if l.startswith('TcpExt:')]
    return dict(zip(rows[0][1:], map(int, rows[1][1:])))
e0 = ext()
t = time.monotonic()
import os  # CHUNK=bytes: the PS chunk size (a diagnostic; default hosts/ps.py CHUNK_BYTES)
kw = {"chunk_bytes": int(os.environ["CHUNK"])} if os.environ.get("CHUNK") and algo == "ps" else {}
res, st = mod.allreduce(arr, rank=rank, peers=peers, give_up=30, link_mbps=mbps, return_stats=True, mesh=mesh, **kw)
t1 = time.monotonic()
ok = bool(np.array_equal(res, np.arange(elements, dtype=np.int32) * (n * (n + 1) // 2)))
print(json.dumps({"rank": rank, "start": t, "end": t1, "seconds": st.seconds, "retrans": st.retransmissions,
                  "segs": st.packets_sent, "ok": ok, "cc": next(iter(mesh.out.values())).sock.getsockopt(6, 13, 16).rstrip(b"\0").decode(), "ext": {k: v - e0[k] for k, v in ext().items() if v != e0[k]}}))
mesh.close()
