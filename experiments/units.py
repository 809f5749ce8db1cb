"""Real-network units in, emulated units out, and times back again.

Why a scale factor: the emulator is faithful only while links, not Python, are the
bottleneck (`agglab calibrate` measures the highest faithful per-link rate, the
*ceiling*). An experiment is written for the real network (100 Gb/s links, a 100 MB
gradient) and run with every link divided by the same rate scale

    s = fastest real link / ceiling          (e.g. 100 Gb/s / 5 Mb/s = 20000)

so ratios between links (oversubscription, slow links) are kept, and with a gradient
shrunk by the size scale  z = real gradient / emulated gradient  so runs stay short.
A bandwidth-bound time then converts back as

    real time = emulated time * z / s

and a propagation delay would scale the other way (emulated delay = real delay * s / z).
This kernel has no netem, so delay is not emulated (DELAY_NOTE); at the scales used here
a data-centre delay of a few microseconds becomes well under a millisecond anyway.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from agglab.ground.scale import Scale  # noqa: F401 (one Scale, shared with PACE runs)

DELAY_NOTE = ("propagation delay is not emulated (no netem on this kernel): the emulated links "
              "have only their serialisation and queueing delay; a real delay d would be d*s/z here")

_NUMBER = r"\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*"
_PREFIX = {"": 1.0, "k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}
_BIN = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}
_RATE = re.compile(rf"^{_NUMBER}([kKMGT]?)(?:b/s|bps|bit/s|bit)$")
_SIZE = re.compile(rf"^{_NUMBER}([kKMGT]i?|)(B|bytes?)$")
_TIME = re.compile(rf"^{_NUMBER}(ns|us|µs|ms|s)$")
_SECONDS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0}


class UnitError(ValueError):
    """A quantity without a recognised unit."""


def parse_rate(text: str | float) -> float:
    """'100Gbps', '100 Gb/s', '5Mbit' -> bits per second. A bare number is refused: a rate
    without a unit is the typo this module exists to catch."""
    m = _RATE.match(str(text).strip())
    if not m:
        raise UnitError(f"{text!r} is not a rate: write e.g. 100Gbps, 25 Gb/s or 5Mbit")
    return float(m[1]) * _PREFIX[m[2]]


def parse_size(text: str | int) -> int:
    """'100MB' -> 100_000_000 bytes, '256KiB' -> 262144, '25 MB' -> 25_000_000."""
    m = _SIZE.match(str(text).strip())
    if not m:
        raise UnitError(f"{text!r} is not a size: write e.g. 100MB, 256KiB or 4096B")
    factor = _BIN.get(m[2]) or _PREFIX[m[2]]
    return int(round(float(m[1]) * factor))


def parse_time(text: str) -> float:
    """'10us' -> 1e-05 seconds."""
    m = _TIME.match(str(text).strip())
    if not m:
        raise UnitError(f"{text!r} is not a time: write e.g. 2us, 1.5ms or 3s")
    return float(m[1]) * _SECONDS[m[2]]


def format_rate(bps: float) -> str:
    for unit, f in (("Tb/s", 1e12), ("Gb/s", 1e9), ("Mb/s", 1e6), ("kb/s", 1e3)):
        if bps >= f:
            return f"{bps / f:.3g} {unit}"
    return f"{bps:.3g} b/s"


def format_size(n: float) -> str:
    for unit, f in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= f:
            return f"{n / f:.3g} {unit}"
    return f"{n:.0f} B"


def format_time(seconds: float) -> str:
    for unit, f in (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6)):
        if abs(seconds) >= f:
            return f"{seconds / f:.3g} {unit}"
    return f"{seconds / 1e-9:.3g} ns"


