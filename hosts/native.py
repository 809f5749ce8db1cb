"""The dense int32 agent's per-result work in C (hosts/fastagent.c), when it was built.

Why: at a result per wake-up the agent spent about 60% of its CPU in Python (py-spy,
docs/measurements.md 2026-12-06, fifth session): DenseRun.on_batch's checks and its numpy
store of the lanes, send_round's packing and bookkeeping, the ctypes calls around
sendmmsg/recvmmsg. `dense_core(run)` gives a DenseRun of an int32 array a C object that
does on_batch's accept loop and send_round for its data rounds on the run's own per-slot
lists; everything else (the lead check, the RTO estimator, timers, resends, control polls,
the loop) stays in hosts/agent.py and hosts/slots.py, which remain the reference:
tests/test_agent_native.py feeds both the same result streams, bit-exact.

Float runs stay on the Python path (their bodies are quantised per round with numpy, where
numpy wins). The extension is optional (setup.py): without a compiler `pip install .` still
works and `AVAILABLE` is False; AGGLAB_NATIVE=0 turns it off where it was built (the
bench's "before"), for the agents as for the switch (softswitch/native.py).
"""

from __future__ import annotations

import os

from agglab.ground import wire
from agglab.hosts.protocol import LAYOUT, HEADER_BYTES, PAYLOAD_BYTES, HeaderPacker

try:
    from agglab.hosts import _fastagent
    _WHY_NOT = ""
except ImportError as exc:                 # not built (no compiler at install time)
    _fastagent = None
    _WHY_NOT = f"the C fast path is not built ({exc})"

AVAILABLE = _fastagent is not None
sendmmsg = _fastagent.sendmmsg if AVAILABLE else None   # (fd, hdr_address, count) -> sent or -errno
recvmmsg = _fastagent.recvmmsg if AVAILABLE else None   # (fd, hdr_address, count) -> n
_SIZES = {"B": 1, "H": 2, "I": 4}
READ = ("job", "flags", "ver", "slot", "worker", "exp", "block")
PACKED = ("tree", "epoch", "ver", "slot", "exp", "block", "next_block")   # slots.PACKET_FIELDS


def enabled() -> bool:
    """Built and not turned off with AGGLAB_NATIVE=0."""
    return AVAILABLE and os.environ.get("AGGLAB_NATIVE", "1") != "0"


def describe() -> str:
    if enabled():
        return "agent data path: native C for int32 results and data rounds (agglab.hosts._fastagent)"
    return f"agent data path: Python ({'AGGLAB_NATIVE=0' if AVAILABLE else _WHY_NOT})"


def dense_core(run):
    """The C core of DenseRun `run` (an int32 run), or None where the native path is off."""
    if not enabled() or run.is_float or not run.raw:
        return None
    words = tuple(_SIZES[c] for c in wire.AGG_STRUCT.format.lstrip("!"))
    assert sum(words) == HEADER_BYTES
    base = tuple(HeaderPacker(job=run.job, worker=run.rank)._base)
    lists = (run.round, run.rounds, run.v0, run.sent_at, run.last_sent, run.tries, run.agreed, run.deadline,
             run.packet)
    consts = (run.job, run.S, run.nblocks, run.rank, wire.K, PAYLOAD_BYTES, wire.FLAG_RESULT, wire.FLAG_RETX,
              wire.NEXT_NONE)
    return _fastagent.Core(run, lists, run.tx.send, run.raw, run.sums, words, base,
                           tuple(LAYOUT[n] for n in READ), tuple(LAYOUT[n] for n in PACKED), consts,
                           float(run.frame_time))
