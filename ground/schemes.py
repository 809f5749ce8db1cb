"""The aggregation schemes: one row per `--algorithm`, read by every layer.

Why one table: a scheme's facts (does the network or do the hosts sum, does it need the
P4 pipeline, is its data block-sparse, its default window, what it costs in the PACE model)
used to be restated as string literals in about twenty files. Every choice list, validation
message, help text, cost model, experiment and benchmark derives from `SCHEMES`; each layer
finds a module of the same name per layer (softswitch/schemes/NAME.py, hosts/schemes/NAME.py,
controller/schemes/NAME.py; p4src/agglab.p4's include, instance and branch are generated from
the rows), and builds
its registries from them (the twin's BRANCHES, the hosts' RUNNERS, the controller's
INSTALLERS and CARRIES, the wire model's dispatch). tests/test_schemes.py checks every layer
has every row. Adding a scheme = one row here + its own module per layer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from agglab.ground import wire

# Outstanding slots per worker when a run does not say (hosts/slots.py uses the same).
# Dense: 128 keeps a 20 Mb/s link busy through the emulator's millisecond round trips.
# Sparse: every call starts each slot with a dense lead frame, so the window is a per-call
# cost in frames; 32 slots still keep the link busy (only columns with data send), and the
# lead overhead drops 4x. Measured (8 workers x 1M int32, overlap, 5 Mb/s, one switch):
# speed-up over dense 8.6x / 33x at window 128, 9.0x / 41x at 64, 9.3x / 64x at 32,
# 9.8x / 74x at 16 (density 0.1 / 0.01); at 20 Mb/s 32 beats 16 and 64 (4.1x / 21x, sparse CPU-bound).
DEFAULT_WINDOW = 128
SPARSE_WINDOW = 32


@dataclass(frozen=True)
class Scheme:
    """One aggregation scheme.

    in_network: the switches sum (the P4 pipeline runs); else the hosts sum over TCP and the
    switches only forward IP. p4: the scheme has a branch of its own in the P4 program and its
    software-switch twin. sparse: its inputs are block-sparse. window: outstanding blocks per
    worker by default. cost: the PACE model's (bytes factor, start-ups) as functions of the
    worker count n (pace/fusion.py CostModel). shares_pool: tenants share one aggregator pool
    best-effort instead of disjoint slot ranges (its P4 control has a table of its own, applied
    before agg_job's lookup). flag: the #define (in its own p4src/include .p4) of the agg_h flag bit that selects
    its P4 control ('' = none: the dense default). summary: the help text's words."""
    name: str
    in_network: bool
    p4: bool
    sparse: bool
    window: int
    summary: str
    bytes_factor: Callable[[int], float] = lambda n: 1.0   # bytes per gradient byte on a worker's link
    startups: Callable[[int], float] = lambda n: 1.0       # latency start-ups per allreduce
    shares_pool: bool = False
    dtypes: tuple[str, ...] = ("int32", "float32")
    flag: str = ""

    @property
    def flag_bits(self) -> int:
        """The agg_h flag value that selects its P4 control (0 for the dense default)."""
        return wire.CONST[self.flag] if self.flag else 0

    def cost(self, workers: int) -> tuple[float, float]:
        """(bytes factor, start-ups) of the PACE cost model for `workers` ranks."""
        n = max(workers, 2)
        return float(self.bytes_factor(n)), float(self.startups(n))


SCHEMES: dict[str, Scheme] = {s.name: s for s in (
    Scheme("switchml", in_network=True, p4=True, sparse=False, window=DEFAULT_WINDOW,
           summary="dense, the switches sum (SwitchML)"),
    Scheme("omnireduce", in_network=True, p4=True, sparse=True, window=SPARSE_WINDOW, flag="AGG_FLAG_SPARSE",
           summary="block-sparse, the switches sum (OmniReduce)"),
    Scheme("atp", in_network=True, p4=True, sparse=False, window=DEFAULT_WINDOW, shares_pool=True,
           flag="AGG_FLAG_ATP", dtypes=("int32",), summary="best effort in a pool every job shares, the rest at a "
           "parameter server (ATP)"),
    Scheme("ring", in_network=False, p4=False, sparse=False, window=DEFAULT_WINDOW,
           summary="ring allreduce between the hosts over TCP",
           bytes_factor=lambda n: 2 * (n - 1) / n, startups=lambda n: 2 * (n - 1)),
    Scheme("ps", in_network=False, p4=False, sparse=False, window=DEFAULT_WINDOW,
           summary="a colocated parameter server over TCP", bytes_factor=lambda n: 2 * (n - 1) / n,
           startups=lambda n: 2),
)}

NAMES: tuple[str, ...] = tuple(SCHEMES)
DEFAULT = "switchml"             # --algorithm when a run does not say
IN_NETWORK: tuple[str, ...] = tuple(n for n, s in SCHEMES.items() if s.in_network)
HOST_BASELINES: tuple[str, ...] = tuple(n for n, s in SCHEMES.items() if not s.in_network)
P4_SCHEMES: tuple[str, ...] = tuple(n for n, s in SCHEMES.items() if s.p4)
# in-network schemes aggregated along the controller's trees (rerouted with a carry)
ON_TREES: tuple[str, ...] = tuple(n for n, s in SCHEMES.items() if s.in_network and not s.shares_pool)
# P4 schemes whose control has a table of its own (branched to by flag before agg_job)
OWN_TABLE: tuple[str, ...] = tuple(n for n in P4_SCHEMES if SCHEMES[n].shares_pool)


def kind(name: str) -> str:
    """'sparse' or 'dense': how figures and logs name a scheme's data."""
    return "sparse" if SCHEMES[name].sparse else "dense"


def scheme(name: str) -> Scheme:
    """The row of `name`, or ValueError naming the choices (the CLI's one line)."""
    try:
        return SCHEMES[name]
    except KeyError:
        raise ValueError(f"--algorithm must be one of {', '.join(NAMES)}, got {name!r}") from None


def help_text() -> str:
    """`--algorithm`'s help: every scheme with its summary."""
    return "; ".join(f"{s.name}: {s.summary}" + (f", {' or '.join(s.dtypes)} only" if len(s.dtypes) == 1 else "")
                     for s in SCHEMES.values())
