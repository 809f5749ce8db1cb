"""hosts/schemes/atp.py: the PS's pieces (difference of a covering set, duplicates, waiting sets)
and a whole ATP allreduce between threads on loopback addresses with random loss on every
send: no switch aggregates, so every packet falls back to the PS, which must deduplicate the
resends and answer lost results; every rank's sum is exact."""

from __future__ import annotations

import random
import socket
import threading
import time
from types import SimpleNamespace

import numpy as np
import pytest

from agglab.testkit.waits import wait_until
from agglab.ground import wire
from agglab.hosts.schemes import atp
from agglab.hosts.protocol import decode, encode

K = wire.K


def v(x: int) -> np.ndarray:
    return np.full(K, x, dtype=np.int32)


def test_a_covering_set_contributes_its_difference():
    p = atp.Pieces()
    assert p.add(0b0001, v(1)) and p.add(0b0010, v(2))
    assert not p.add(0b0010, v(2))                       # a duplicate
    assert p.add(0b0110, v(2 + 4))                       # rack {1, 2}: {2} from the difference
    assert p.have == 0b0111
    assert not p.add(0b0100, v(4))                       # covered already
    assert p.add(0b1000, v(8))
    assert p.have == 0b1111 and (p.total() == 15).all()


def test_int32_wraps_like_the_switch():
    p = atp.Pieces()
    big = np.full(K, 2**31 - 1, dtype=np.int32)
    p.add(1, big)
    p.add(2, big)
    assert (p.total() == np.int32(-2)).all()


def test_a_straddling_set_waits_until_it_is_usable():
    p = atp.Pieces()
    p.add(0b0011, v(3))
    assert not p.add(0b0110, v(6))                       # straddles {0, 1}: waits
    assert p.have == 0b0011
    assert p.add(0b0100, v(4))                           # {2}; the waiting {1, 2} is then covered
    assert p.have == 0b0111 and (p.total() == 7).all()


class _Comm:
    def __init__(self, rank, peers, job, elements, window=16):
        from agglab.ground.runspec import RunPlan, RunSpec, WorkerSeat

        spec = RunSpec(workers=len(peers), elements=elements, algorithm="atp", job=job, give_up=10.0)
        seats = [WorkerSeat(rank=r, local_ip=ip, out="") for r, ip in enumerate(peers)]
        self.plan = RunPlan(spec, "10.255.255.254", window, None, seats)
        self.spec, self.seat, self.rank, self.workers = spec, seats[rank], rank, len(peers)
        self.block_progress = None

    def route(self) -> dict:
        return {}                     # unshaped loopback: no epoch file, no path rates

    def ready(self) -> None:
        """The start gate (hosts/communicator.py): threads of one process have none to pass."""


@pytest.mark.parametrize("loss, n", [(0.0, 4), (0.2, 4), (0.0, 40)], ids=["4-lossless", "4-loss", "40-ranks"])
def test_allreduce_on_loopback_is_exact_under_loss(loss, n, monkeypatch):
    """40 ranks: sender bits past 31 travel in the high word (ground/wide_senders.py) and the
    PS still completes every block."""
    elements = K * (50 if n < 32 else 6) + 7
    base = random.randrange(2, 200)
    peers = [f"127.0.{base}.{r + 1}" for r in range(n)]
    rng = random.Random(7)
    lock = threading.Lock()
    real = atp.AtpEndpoint._sendto

    def lossy(self, payload, dest):
        with lock:
            lost = rng.random() < loss
        if not lost:
            real(self, payload, dest)

    monkeypatch.setattr(atp.AtpEndpoint, "_sendto", lossy)
    arrays = [np.random.default_rng(r).integers(-2**31, 2**31, elements, dtype=np.int64).astype(np.int32)
              for r in range(n)]
    expected = np.zeros(elements, dtype=np.int64)
    for a in arrays:
        expected += a
    expected = expected.astype(np.int32)        # int32 wrap-around
    results, errors = [None] * n, []
    comms = [_Comm(r, peers, 3, elements) for r in range(n)]

    def run(r):
        try:
            results[r] = atp.allreduce(comms[r], arrays[r])
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(f"rank {r}: {exc!r}")

    threads = [threading.Thread(target=run, args=(r,)) for r in range(n)]
    [t.start() for t in threads]
    [t.join(60) for t in threads]
    for c in comms:
        if getattr(c, "_atp", None):
            c._atp.close()
    assert not errors, errors
    for r in range(n):
        out, stats = results[r]
        assert np.array_equal(out, expected), r
    ps_stats = results[0][1]
    assert ps_stats["ps_fallback_packets"] >= (n - 1) * -(-elements // K)   # no switch: all fell back
    if loss:
        assert sum(results[r][1]["retransmissions"] for r in range(1, n)) > 0


class _Clock:
    """atp's time.monotonic, pushed ahead on demand; counts its reads, so a test knows the PS's
    linger has looked at the clock since (the silence is a fake clock's jump, not a sleep)."""

    def __init__(self):
        self.ahead, self.reads = 0.0, 0

    def monotonic(self) -> float:
        self.reads += 1
        return time.monotonic() + self.ahead


def test_a_result_lost_after_the_ps_finished_is_answered_however_long_the_worker_was_silent(monkeypatch):
    """The frame behind the loss test's rare hangs: the PS's result of a job's last block to
    one worker is lost, and so are that worker's resends for a while (a run of losses, or a
    worker starved of CPU), while the PS has already completed every block. The PS must not
    forget the answer on a quiet timer: only the worker knows it still needs it."""
    ip = f"127.0.{random.randrange(2, 200)}."
    peers, nb, silence = [ip + "1", ip + "2"], 3, 3.5     # silent longer than the PS used to wait
    clock = _Clock()
    monkeypatch.setattr(atp, "time", SimpleNamespace(monotonic=clock.monotonic))
    ps = atp.AtpEndpoint(peers[0], peers, 0, job=5)
    ps_rows, w_rows = np.arange(nb * K, dtype=np.int32).reshape(nb, K), np.full((nb, K), 7, dtype=np.int32)
    served = {}
    t = threading.Thread(target=lambda: served.update(out=ps.serve(ps_rows, 2, give_up=30.0)))
    t.start()
    w = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    w.bind((peers[1], wire.UDP_PORT))
    w.settimeout(5.0)

    def send(b, flags=0):
        w.sendto(encode({"job": 5, "flags": atp.FLAG_ATP | flags, "worker": 1, "block": b, "next_block": 0b10},
                        w_rows[b] if b < nb else v(0)), (peers[0], wire.UDP_PORT))

    def result():
        hdr, vals = decode(w.recv(2048))
        assert hdr["flags"] & atp.RESULT and hdr["job"] == 5
        return hdr["block"], vals

    try:
        for b in range(nb):
            send(b)
        assert sorted(result()[0] for _ in range(nb)) == list(range(nb))    # the last one is "lost"
        t.join(10)
        assert not t.is_alive() and "out" in served                          # the PS completed every block
        clock.ahead, reads = silence, clock.reads                            # the worker's resends are lost
        wait_until(lambda: clock.reads >= reads + 2 or not ps._linger.is_alive(),
                   what="the PS's linger to look at the clock after the silence")
        send(nb - 1, atp.RETX)
        b, vals = result()
        assert b == nb - 1 and np.array_equal(vals, ps_rows[nb - 1] + 7)
        send(atp.FIN_BLOCK, atp.RETX)                                        # now it has every result
        assert result()[0] == atp.FIN_BLOCK                                  # acknowledged
        ps._linger.join(10)
        assert not ps._linger.is_alive()                  # the FIN ended it, not the 30 s of quiet
    finally:
        w.close()
        ps._stop_linger()
        ps.close()


def test_a_packet_of_the_next_call_ends_the_linger_and_is_summed_by_that_call():
    """A worker whose FIN went unacknowledged starts its next call while the PS still
    lingers: that packet says the worker has every result, and the linger, which read it,
    hands it to the next call instead of dropping it (its sum would be resent otherwise)."""
    ip = f"127.0.{random.randrange(2, 200)}."
    peers = [ip + "1", ip + "2"]
    ps = atp.AtpEndpoint(peers[0], peers, 0, job=6)
    w = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    w.bind((peers[1], wire.UDP_PORT))
    w.settimeout(5.0)

    def send(seq, x):
        w.sendto(encode({"job": 6, "flags": atp.FLAG_ATP, "worker": 1, "block": seq, "next_block": 0b10}, v(x)),
                 (peers[0], wire.UDP_PORT))

    try:
        send(0, 1)                                                 # call 0, one block, no FIN
        first = ps.serve(np.array([v(10)]), 2, give_up=30.0)[0]
        assert (decode(w.recv(2048))[1] == 11).all() and (first == 11).all()
        send(1 << atp.SEQ_BITS, 2)                                 # call 1's block while the PS lingers
        ps._linger.join(10)
        assert not ps._linger.is_alive()                           # it ended the linger, not 30 s of quiet
        second = ps.serve(np.array([v(20)]), 2, give_up=5.0)[0]    # without that packet: a timeout
        assert (second == 22).all()
        hdr, vals = decode(w.recv(2048))
        assert hdr["block"] == 1 << atp.SEQ_BITS and (vals == 22).all()
    finally:
        w.close()
        ps._stop_linger()
        ps.close()


def test_a_result_sent_again_says_so_and_is_otherwise_the_same():
    first = encode({"job": 3, "flags": atp.FLAG_ATP | atp.RESULT, "block": 7, "next_block": 0b1111}, v(5))
    hdr, vals = decode(atp._again(first))
    assert hdr["flags"] == atp.FLAG_ATP | atp.RESULT | atp.RETX       # the worker does not time it
    assert (hdr["job"], hdr["block"], hdr["next_block"]) == (3, 7, 0b1111) and (vals == 5).all()
    assert decode(first)[0]["flags"] & atp.RETX == 0                   # the stored answer is unchanged
    assert atp._again(None) is None


def test_a_worker_gives_up_only_after_every_missing_block_was_resent_enough(monkeypatch):
    """A PS that never answers: the worker waits past `give_up` until each block it lacks was
    resent GIVE_UP_TRIES times (a busy machine backs its timer off to give_up / 6, and a few
    lossy tries must not end a run whose PS is alive), then gives up in one line saying so.
    With the old rule (give up after `give_up` s whatever the tries) each block had 6 sends."""
    ip = f"127.0.{random.randrange(2, 200)}."
    peers = [ip + "1", ip + "2"]
    silent = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    silent.bind((peers[0], wire.UDP_PORT))                       # the PS's address swallows everything
    sends: dict[int, int] = {}
    real = atp.AtpEndpoint._sendto

    def counted(self, payload, dest):
        hdr, _ = decode(payload)
        sends[hdr["block"]] = sends.get(hdr["block"], 0) + 1
        real(self, payload, dest)

    monkeypatch.setattr(atp.AtpEndpoint, "_sendto", counted)
    worker = atp.AtpEndpoint(peers[1], peers, 1, job=9)
    try:
        with pytest.raises(atp.AllreduceTimeout, match=r"resent at least 12 times\); 2 blocks missing"):
            worker.work(np.full((2, K), 3, dtype=np.int32), 2, give_up=1.2)
    finally:
        worker.close()
        silent.close()
    assert len(sends) == 2 and min(sends.values()) >= 1 + 12, sends
