"""One mapping between a real network and its emulation (experiments and PACE runs share it).

s = `rate` divides every link rate (real / emulated), z = `size` divides the gradient (real
bytes / emulated bytes). A bandwidth-bound transfer then takes z/s of its real time in the
emulator's units reversed: real time = emulated time x z / s; `dilation` = s / z is
emulated seconds per real second (PACE sleeps compute that many times its profile time so
compute and communication keep their real proportions).
"""

from __future__ import annotations

from dataclasses import dataclass

MiB = 1 << 20


@dataclass(frozen=True)
class Scale:
    """The mapping between one real network and its emulation."""
    rate: float            # s: real rate / emulated rate
    size: float            # z: real gradient / emulated gradient

    @classmethod
    def fit(cls, fastest_link_bps: float, ceiling_bps: float, real_bytes: int, emulated_bytes: int) -> "Scale":
        """The rate scale that puts the fastest link exactly at the ceiling (never below 1:
        a network already under the ceiling runs as it is)."""
        if ceiling_bps <= 0 or emulated_bytes <= 0:
            raise ValueError("the ceiling and the emulated gradient must be positive")
        return cls(rate=max(1.0, fastest_link_bps / ceiling_bps), size=real_bytes / emulated_bytes)

    @classmethod
    def of(cls, link_gbps: float, bw_mbps: float, total_bytes: int, emulated_mb: float) -> "Scale":
        """PACE's: the real link over the emulated one, and the model's gradient over
        `emulated_mb` MiB per worker (never inflating a small model)."""
        return cls(rate=link_gbps * 1e3 / bw_mbps, size=max(1.0, total_bytes / (emulated_mb * MiB)))

    @property
    def dilation(self) -> float:
        """Emulated seconds per real second."""
        return self.rate / self.size

    def link_mbps(self, real_bps: float) -> float:
        """An emulated link rate in Mb/s (what --bw and topology files take)."""
        return real_bps / self.rate / 1e6

    def real_seconds(self, emulated_seconds: float) -> float:
        return emulated_seconds * self.size / self.rate

    def emulated_delay(self, real_seconds: float) -> float:
        return real_seconds * self.rate / self.size

    def describe(self) -> str:
        return (f"rates / {self.rate:.6g}, gradient / {self.size:.6g}; "
                f"real time = emulated time x {self.size / self.rate:.6g}")
