"""Exercise 2's checks: loss recovery, the switch's two versions per slot and the host's timer.

Its vectors cover the shadow copy and duplicates after completion; then an allreduce at 5%
loss, and two allreduces in a row on the same switch state (the versions must alternate
across calls, which no single call shows).
"""

from __future__ import annotations

from agglab.exercise_kit import dense_allreduce, explain, first_difference, result, short_error
from agglab.ground.wire import K

TITLE = "Loss recovery: two versions per slot, the shadow copy, the retransmission timer"
MINUTES = 75
FILES = ("softswitch/aggregate.py", "p4src/include/aggregate.p4", "hosts/agent.py", "hosts/slots.py")
REGIONS = ("shadow-copy", "slot-version", "retransmit-timer")
VECTORS = ("version_flip_shadow", "duplicate_after_completion", "completion_multicast")
BMV2_RUN = dict(elements=4096, loss=0.05)

ABOUT_LOSS = ("at 5% loss per packet and direction every slot needs retransmissions: the host's "
              "timer must resend and re-arm until a result comes, and the switch must tell a "
              "retransmission (bit already set) from a new round of the other version")
ABOUT_TWO_CALLS = ("the first call gives every slot 3 rounds (versions v, v+1, v), so the switch "
                   "still holds each slot's last, completed version; the second call must start "
                   "each slot on the other version, or the switch answers it with the old result")


ABOUT_TIMER = ("a slot's timer that fires must resend once and re-arm (deadline[s] moved to when the "
               "resend leaves plus the backed-off RTO); a timer left in the past fires again on every "
               "pass of the agent's loop, so the slot is resent hundreds of times, not once per loss")
RESENDS_PER_PACKET = 4    # at 5% loss a correct timer resends a fraction of a worker's packets once or
                          # twice (well under one per packet, about one on a loaded machine); a timer
                          # never re-armed resends on every poll: 10 to 40 times per packet


def timer_rearms(name: str, n: int = 4, length: int = 4096) -> dict:
    """The lossy allreduce again, counting each worker's resends against the packets it sent
    once: the sums of a timer that resends but is never re-armed still come out exact (it
    resends on every pass of the agent's loop, so every loss is repaired), only the count
    shows it."""
    import numpy as np  # lazy: `agglab exercise list` loads this file for its title

    from agglab.testkit.fakenet import FakeNet  # lazy: loads the software switch, only this check needs it

    rng = np.random.default_rng(7)
    arrays = [rng.integers(-1000, 1000, length, dtype=np.int32) for _ in range(n)]
    results = FakeNet(n, backend="pipeline", loss=0.05, seed=3).run(arrays, join_timeout=60, give_up=5)
    for rank, r in enumerate(results):
        if isinstance(r, BaseException):
            return result(name, False, f"rank {rank}: {short_error(r)}")
    sent = [(r[1].retransmissions, r[1].packets_sent - r[1].retransmissions) for r in results]
    rank, (resent, once) = max(enumerate(sent), key=lambda e: e[1][0] / max(1, e[1][1]))
    if resent > RESENDS_PER_PACKET * once:
        return result(name, False, f"rank {rank} resent {resent} times for the {once} packets it sent once "
                                   f"(at most {RESENDS_PER_PACKET * once} expected at 5% loss): the timer resends "
                                   f"but is not re-armed (deadline[s] stays in the past, so it fires again at "
                                   f"once)")
    return result(name, True, f"rank {rank}, the most: {resent} resends for {once} packets sent once")


def two_allreduces(name: str) -> dict:
    """Two allreduces in a row on the same switch state: the versions must alternate across calls.
    The first call gives every slot three rounds (a lead and two blocks: versions v, v+1, v), so
    the second call must start each slot at the other version (v0), not at version 0 again."""
    import numpy as np  # lazy: numpy, only two_allreduces() needs it (`agglab exercise list` loads check.py for its title)

    from agglab.testkit.fakenet import FakeNet  # lazy: loads numpy, only two_allreduces() needs it (`agglab exercise list` loads check.py for its title)

    n, window = 3, 16
    net = FakeNet(n, backend="pipeline")
    for call, length in enumerate((2 * window * K, window * K)):
        arrays = [np.full(length, r + 10 * call, np.int32) for r in range(n)]
        results = net.run(arrays, join_timeout=60, give_up=3, window=window)
        expected = np.sum(np.stack(arrays), axis=0, dtype=np.int32)
        for rank, r in enumerate(results):
            if isinstance(r, BaseException):
                return result(name, False, f"call {call + 1}, rank {rank}: {short_error(r)}")
            if not np.array_equal(r[0], expected):
                return result(name, False, f"call {call + 1}, rank {rank}: {first_difference(r[0], expected)}")
    return result(name, True, "second call got fresh sums")


def checks(work):
    return [explain(dense_allreduce("allreduce 4 workers at 5% loss (software switch)", loss=0.05, seed=3),
                    ABOUT_LOSS),
            explain(timer_rearms("retransmission timer re-arms (software switch)"), ABOUT_TIMER),
            explain(two_allreduces("two allreduces in a row (software switch)"), ABOUT_TWO_CALLS)]
