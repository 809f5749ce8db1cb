"""agglab's names for the network namespaces it makes, in one place: who makes which, and which
process made one.

Why one place: `agglab clean` removes a namespace whose creating process is gone, and must
never touch one whose creator still runs (a test running now) or one agglab did not name.
A namespace has no owner record of its own (a conformance test killed mid-module left an
`agglab-conf-<hex>` that only `ip netns del` by hand removed), so the creator's pid is in
the name, and each maker builds its names here (`Kind.new`) while clean reads them back
here (`survey`): a maker cannot use a prefix clean does not know.
tests/test_netnames.py finds every `ip netns add` in the product code and checks that its
module takes its names from here.

Interfaces need no entry: every interface agglab makes outside a run record is a veth with
an end inside one of these namespaces (a software-switch lab's root-side `agc<tag>p<N>`), and
a veth goes with either end's namespace. Mininet's `s1-eth1` in the root namespace are the
run records' (ground/rundir.py, interface groups).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

NETNS_DIR = Path("/run/netns")


@dataclass(frozen=True)
class Kind:
    """One maker's namespaces: `<prefix><creator pid>-<rest>` (rest matching `rest`); a name
    with the prefix and `legacy` shape is an older agglab's, made before the pid was in it."""
    prefix: str
    maker: str                 # who makes them, for clean's listing
    rest: str                  # the regex of what follows the pid
    legacy: str | None = None  # the regex of what followed the prefix before the pid was in it
    owned: bool = True         # False: no process owns them (clean never removes them)

    def new(self, rest: str, owner: int | None = None) -> str:
        """A name for a namespace the calling process (or `owner`) makes."""
        name = f"{self.prefix}{owner or os.getpid()}-{rest}"
        if self.owner_of(name) is None:
            raise ValueError(f"{name!r} is not a name of {self.maker}")
        return name

    def owner_of(self, name: str) -> int | None:
        """The creator's pid in `name` (None: not this kind's name, or a legacy one)."""
        if not self.owned:
            return None
        m = re.fullmatch(rf"{re.escape(self.prefix)}(\d+)-(?:{self.rest})", name)
        return int(m.group(1)) if m else None

    def names(self, name: str) -> bool:
        """`name` is this kind's (with its creator's pid, or in the legacy shape)."""
        if self.owner_of(name) is not None:
            return True
        shape = self.rest if not self.owned else self.legacy
        return shape is not None and re.fullmatch(rf"{re.escape(self.prefix)}(?:{shape})", name) is not None


RUN = Kind("agglab-run-", "an emulated network's run (ground/netns.py)", r"[0-9a-f]+")
CONF = Kind("agglab-conf-", "a conformance test's BMv2 ports (agglab/testkit/netns.py)", r"[0-9a-f]+",
            legacy=r"[0-9a-f]{8}")
SCRATCH = Kind("agglab-t-", "a software-switch lab or bench chain (softswitch/scratchnet.py)",
               r"[0-9a-f]+-[a-z]+\d*", legacy=r"[0-9a-f]{5}-[a-z]+\d*")
CLUSTER = Kind("agglab-c", "a practice cluster's server (emulation/cluster/practice.py; "
               "`agglab cluster local down` removes it)", r"\d+", owned=False)
KINDS = (RUN, CONF, SCRATCH, CLUSTER)


def kind_of(name: str) -> Kind | None:
    """The kind that names `name` (None: not a name agglab makes)."""
    return next((k for k in KINDS if k.names(name)), None)


def owner_of(name: str) -> int | None:
    """The pid of the process that made namespace `name` (None: not ours, or not known)."""
    kind = kind_of(name)
    return kind.owner_of(name) if kind else None


@dataclass(frozen=True)
class Found:
    """A namespace agglab named, as clean sees it."""
    name: str
    kind: Kind
    owner: int | None          # its creator's pid; None when the name does not say

    def line(self) -> str:
        who = f"made by pid {self.owner}" if self.owner else "who made it is unknown"
        return f"{self.name} ({self.kind.maker}; {who})"


def survey(directory: Path = NETNS_DIR) -> list[Found]:
    """Every named network namespace on the machine that agglab named, sorted by name."""
    try:
        entries = sorted(p.name for p in directory.iterdir())
    except OSError:
        return []
    return [Found(n, k, k.owner_of(n)) for n in entries if (k := kind_of(n)) is not None]
