"""hosts/worker.py with --algorithm omnireduce over real loopback UDP, without Mininet.

Why: `agglab allreduce --algorithm omnireduce` runs this entry point in every
host namespace and checks its .npy/.json against expected_sparse_sum; here the
same argv runs in threads against the software switch's sparse pipeline behind a UDP socket
(as tests/test_hosts_transport.py does for the dense agent), on a free port.
"""

import functools
import json
import socket
import threading

import numpy as np

from agglab.ground import wire
import pytest

import agglab.hosts.agent
import agglab.hosts.transport
from agglab.hosts import worker
from agglab.hosts.sparse_workload import expected_sparse_sum, sparse_gradient
from agglab.hosts.workload import expected_sum
from agglab.ground.runspec import RunPlan, RunSpec, WorkerSeat
from agglab.testkit.fakenet import make_frame
from agglab.softswitch.star import star_commands
from test_hosts_sparse import expected_blocks_sent
from test_hosts_transport import SERVICE, free_port

K = wire.K


def serve(sock, n, stop):
    """The real software-switch pipeline behind a UDP socket (worker i = port i+1)."""
    from agglab.softswitch.pipeline import Pipeline

    pipeline, port = Pipeline(seed=0), sock.getsockname()[1]
    for cmd in star_commands(n):
        pipeline.command(cmd)
    sock.settimeout(0.05)
    while not stop.is_set():
        try:
            payload, (ip, _) = sock.recvfrom(65535)
        except socket.timeout:
            continue
        rank = int(ip.rsplit(".", 1)[1]) - 1
        for egress, frame in pipeline.process(rank + 1, make_frame(rank, payload)):
            sock.sendto(frame[wire.AGG_OFFSET:], (f"127.0.0.{egress}", port))


@pytest.mark.parametrize("algorithm", ["omnireduce", "switchml"])
def test_worker_entry_point_reports_blocks_sent(algorithm, tmp_path, monkeypatch):
    n, elements, port = 3, K * 120 + 9, free_port()       # 121 K-blocks, 61 blocks of 2K
    monkeypatch.setattr(agglab.hosts.transport, "UdpTransport",      # the communicator's transport
                        functools.partial(agglab.hosts.transport.UdpTransport, port=port))
    svc = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    svc.bind((SERVICE, port))
    stop = threading.Event()
    server = threading.Thread(target=serve, args=(svc, n, stop), daemon=True)
    server.start()
    spec = RunSpec(workers=n, elements=elements, seed=4, window=8, algorithm=algorithm,
                   **({"density": 0.1, "pattern": "disjoint", "block_size": 2 * K} if algorithm == "omnireduce"
                      else {})).validate()
    seats = [WorkerSeat(rank=r, local_ip=f"127.0.0.{r + 1}", out=str(tmp_path / f"rank{r}")) for r in range(n)]
    plan = RunPlan(spec, SERVICE, 8, None, seats).write(tmp_path / "run.json")
    codes = [None] * n

    def work(rank):
        codes[rank] = worker.main([str(plan), str(rank)])

    threads = [threading.Thread(target=work, args=(r,)) for r in range(n)]
    try:
        [t.start() for t in threads]
        [t.join(60) for t in threads]
    finally:
        stop.set()
        server.join(5)
        svc.close()
    if algorithm == "omnireduce":
        expected = expected_sparse_sum(n, elements, "int32", 0.1, "disjoint", 2 * K, 4)
    else:
        expected = expected_sum(n, elements, "int32", 4)
    for rank in range(n):
        report = json.loads((tmp_path / f"rank{rank}.json").read_text())
        assert codes[rank] == 0 and report["ok"], report
        assert np.array_equal(np.load(tmp_path / f"rank{rank}.npy"), expected)
        if algorithm == "omnireduce":
            data = sparse_gradient(rank, elements, "int32", 0.1, "disjoint", 2 * K, 4)
            assert report["blocks_sent"] == expected_blocks_sent(data, 8, 2 * K)
            assert report["blocks_sent"] <= 8 + 2 * 6          # 6 of 61 blocks of 2 K-blocks
        else:
            assert report["blocks_sent"] == report["blocks"] == 121
