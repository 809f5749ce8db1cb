"""Exercise 7's checks: ATP's shared pool of aggregators, in P4 (p4src/include/atp.p4) and in
its Python twin (softswitch/schemes/atp.py): the hash of (job, seq), collision detection, the
fallback.

First the hash on its own, (job, seq) pairs against atp.p4's definition (zlib's CRC-32 of
the job byte and seq's 4 big-endian bytes, modulo ATP_POOL: computed here, not by the
project's code); then ATP's conformance vectors on the software switch; then two jobs' ATP
allreduces at once through one software switch (the real agents and PS, hosts/schemes/atp.py,
on loopback sockets, every packet through the switch's pipeline), 2% loss: 256 aggregators
for their 2 x 300 sequence numbers, so they collide within a job and across jobs. Each
rank's values are 1 modulo 64, so a wrong sum says how many contributions it lost or counted
twice. Where BMv2 runs (root, simple_switch, p4c), the checker then compiles the student's
atp.p4 and runs the same vectors and an ATP allreduce in Mininet through it (BMV2_RUN).
"""

from __future__ import annotations

from agglab.exercise_kit import explain, result, short_error

TITLE = "ATP's pool: hash (job, seq) to an aggregator, detect collisions, fall back to the PS"
MINUTES = 45
FILES = ("softswitch/schemes/atp.py", "p4src/include/atp.p4")
REGIONS = ("atp-hash", "atp-collision", "atp-fallback")
VECTORS = ("atp_collision_fallback", "atp_release_reuse", "atp_duplicate")
# on BMv2 (root, simple_switch, p4c): the same vectors through the student's atp.p4, then 4 ranks
# (rank 0 the PS) in Mininet through it, 300 blocks: more than the pool's 256 aggregators
BMV2_RUN = dict(elements=19200, algorithm="atp")        # 300 blocks of 64 values

PAIRS = [(1, 5), (2, 110), (0, 0), (3, 1), (1, 2**24 + 7), (7, 2**31 + 12345), (255, 4)]
MOD = 64
JOBS, RANKS, BLOCKS = (1, 2), 4, 300

ABOUT_HASH = ("the switch and the PS's accounting must agree on which aggregator a (job, seq) "
              "takes: atp.p4 computes hash(crc32, {job (8 bits), seq (32 bits)}) % ATP_POOL")
ABOUT_E2E = ("two jobs of 4 ranks (rank 0 is the PS) share one switch's 256 aggregators; a packet "
             "must be added only into its own (job, seq)'s aggregator, and one that finds another's "
             "must reach the PS unchanged, which sums what fell back; every rank's result must hold "
             "every rank's contribution once")


def hash_check(name: str) -> dict:
    import zlib  # lazy: `agglab exercise list` loads check.py for its title

    from agglab.ground import wire  # lazy: `agglab exercise list` loads check.py for its title
    from agglab.softswitch.schemes.atp import aggregator_of  # lazy: `agglab exercise list` loads check.py for its title

    pool = wire.CONST["ATP_POOL"]
    for job, seq in PAIRS:
        want = zlib.crc32(bytes([job]) + seq.to_bytes(4, "big")) % pool
        try:
            got = aggregator_of(job, seq)
        except Exception as exc:
            return result(name, False, f"aggregator_of(job {job}, seq {seq}): {short_error(exc)}")
        if got != want:
            return result(name, False, f"aggregator_of(job {job}, seq {seq}) is {got}, expected {want}")
    return result(name, True, f"{len(PAIRS)} (job, seq) pairs hash as atp.p4's crc32 % {pool}")


def _header(src_mac: bytes, dst_mac: bytes, src: str, dst: str, payload: bytes) -> bytes:
    import socket  # lazy: `agglab exercise list` loads check.py for its title
    import struct  # lazy: `agglab exercise list` loads check.py for its title

    from agglab.ground import wire  # lazy: `agglab exercise list` loads check.py for its title
    from agglab.testkit.frames import checksum16  # lazy: `agglab exercise list` loads check.py for its title

    ip = bytearray(struct.pack("!BBHHHBBH4s4s", 0x45, 0, 28 + len(payload), 0, 0, 64, 17, 0,
                               socket.inet_aton(src), socket.inet_aton(dst)))
    ip[10:12] = struct.pack("!H", checksum16(bytes(ip)))
    udp = struct.pack("!HHHH", wire.UDP_PORT, wire.UDP_PORT, 8 + len(payload), 0)
    return dst_mac + src_mac + b"\x08\x00" + bytes(ip) + udp + payload


def two_jobs(name: str) -> dict:
    """JOBS allreduces at once, every packet through one software switch (port = the host)."""
    import random  # lazy: `agglab exercise list` loads check.py for its title
    import threading  # lazy: `agglab exercise list` loads check.py for its title

    import numpy as np  # lazy: `agglab exercise list` loads check.py for its title

    from agglab.ground import wire  # lazy: `agglab exercise list` loads check.py for its title
    from agglab.ground.runspec import RunPlan, RunSpec, WorkerSeat  # lazy: `agglab exercise list` loads check.py for its title
    from agglab.hosts.schemes import atp  # lazy: `agglab exercise list` loads check.py for its title
    from agglab.softswitch.pipeline import Pipeline  # lazy: `agglab exercise list` loads check.py for its title

    base = random.Random().randrange(2, 200)
    hosts = {(job, r): f"127.{base}.{job}.{r + 1}" for job in JOBS for r in range(RANKS)}
    port = {ip: p + 1 for p, ip in enumerate(hosts.values())}
    mac = {ip: bytes([2, 0, 0, 0, 0, p]) for ip, p in port.items()}
    by_port = {p: ip for ip, p in port.items()}
    sw, lock, rng = Pipeline(seed=0), threading.Lock(), random.Random(7)
    for ip, p in port.items():
        sw.command(f"table_add ipv4_lpm ipv4_forward {ip}/32 => {mac[ip].hex(':')} {p}")
    expect = (1 << RANKS) - 2                                   # every rank but the PS (rank 0)
    for job in JOBS:
        sw.command(f"table_add atp_job atp_aggregate {job} => {expect}")
    real = atp.AtpEndpoint._sendto

    def through_switch(self, payload: bytes, dest) -> None:
        src = self.peers[self.rank]
        frame = _header(mac[src], mac[dest[0]], src, dest[0], bytes(payload))
        with lock:
            if rng.random() < 0.02:
                return
            out = sw.process(port[src], frame)
        for p, f in out:
            real(self, bytes(f[wire.AGG_OFFSET:]), (by_port[p], dest[1]))

    atp.AtpEndpoint._sendto = through_switch

    class Comm:
        def __init__(self, job: int, rank: int):
            peers = [hosts[job, r] for r in range(RANKS)]
            spec = RunSpec(workers=RANKS, elements=BLOCKS * wire.K, algorithm="atp", job=job, give_up=30.0)
            seats = [WorkerSeat(rank=r, local_ip=ip, out="") for r, ip in enumerate(peers)]
            self.plan = RunPlan(spec, "10.255.255.254", 32, None, seats)
            self.spec, self.seat, self.rank, self.workers = spec, seats[rank], rank, RANKS
            self.block_progress = None

        def route(self) -> dict:
            """The controller's epoch file (communicator.route): none here, links unshaped."""
            return {}

        def ready(self) -> None:
            """The start gate (communicator.ready): threads of one process have none to pass."""

    arrays = {(job, r): (1 + MOD * np.random.default_rng(10 * job + r).integers(-999, 999, BLOCKS * wire.K))
              .astype(np.int32) for job in JOBS for r in range(RANKS)}
    comms = {key: Comm(*key) for key in arrays}
    results: dict = {}

    def run(key) -> None:
        try:
            results[key] = atp.allreduce(comms[key], arrays[key])
        except Exception as exc:                 # reported below, by rank
            results[key] = exc

    threads = [threading.Thread(target=run, args=(key,), daemon=True) for key in arrays]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    for c in comms.values():
        if getattr(c, "_atp", None):
            c._atp.close()
    stats = {what: int(sw.counter_arrays["atp_stats"].packets[wire.CONST[f"ATP_STAT_{stat}"]]) for stat, what in
             (("CLAIM", "claimed"), ("ADD", "added"), ("DONE", "completed"), ("COLLIDE", "collided"),
              ("OVERLAP", "overlapped"))}
    for job, r in sorted(arrays):
        got = results.get((job, r))
        if got is None:
            return result(name, False, f"job {job}, rank {r}: no result after 120 s")
        if isinstance(got, BaseException):
            return result(name, False, f"job {job}, rank {r}: {short_error(got)}")
        out = np.asarray(got[0])
        want = np.sum(np.stack([arrays[job, q] for q in range(RANKS)]).astype(np.int64), axis=0).astype(np.int32)
        bad = np.flatnonzero(out != want)
        if bad.size:
            e = int(bad[0])
            counted = int(out[e]) % MOD
            what = (f"{RANKS - counted} of its {RANKS} contributions lost" if counted < RANKS else
                    f"{counted - RANKS} contribution(s) counted twice" if counted > RANKS else
                    "as many contributions as ranks, but not all of this job's and seq's")
            return result(name, False, f"job {job}, rank {r}: seq {e // wire.K} (aggregator "
                                       f"{atp_index(job, e // wire.K)}), element {e} is {int(out[e])}, expected "
                                       f"{int(want[e])}: {what}")
    return result(name, True, f"{len(JOBS)} jobs x {RANKS} ranks x {BLOCKS * wire.K} int32 exact; the switch "
                              + ", ".join(f"{v} {k}" for k, v in stats.items()))


def atp_index(job: int, block: int) -> int:
    """The aggregator of a call's first generation (hosts/schemes/atp.py: seq = gen << 24 | block)."""
    import zlib  # lazy: `agglab exercise list` loads check.py for its title

    from agglab.ground import wire  # lazy: `agglab exercise list` loads check.py for its title

    return zlib.crc32(bytes([job]) + block.to_bytes(4, "big")) % wire.CONST["ATP_POOL"]


def own_vectors() -> list[dict]:
    """The vectors in this folder's vectors/ (the pool's cases the shared ones do not cover) on
    the software switch, worded as the shared ones are."""
    from pathlib import Path  # lazy: `agglab exercise list` loads check.py for its title

    from agglab.exercise_kit import conformance  # lazy: `agglab exercise list` loads check.py for its title
    from agglab.testkit.soft_target import SoftTarget  # lazy: `agglab exercise list` loads check.py for its title

    here = Path(__file__).parent / "vectors"
    return conformance(SoftTarget(), sorted(p.stem for p in here.glob("*.yaml")), True, "software switch", here)


def checks(work):
    return own_vectors() + [
            explain(hash_check("aggregator_of(job, seq) as atp.p4 hashes"), ABOUT_HASH),
            explain(two_jobs("ATP allreduces of 2 jobs sharing the pool (software switch, 2% loss)"), ABOUT_E2E)]
