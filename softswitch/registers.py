"""Register arrays and packet counters backed by numpy.

Why numpy: the aggregation hot path adds K lanes per packet, which numpy does
in one vectorised call on a slice of the register array; and tests and tools
read state directly (`pipeline.registers["agg_values"]`).  Arrays use the
unsigned dtype of the P4 width (bit<32> -> uint32, bit<8> -> uint8), so values
and wrap-around are exactly BMv2's; view agg_values as int32 for signed sums.
"""

from __future__ import annotations

import numpy as np

_DTYPES = {8: np.uint8, 16: np.uint16, 32: np.uint32, 64: np.uint64}


class StateError(Exception):
    """A register/counter operation BMv2 would refuse; str() is BMv2's error code name."""


class RegisterArray:
    """`register<bit<W>>(size) name;` — the array itself is `.data`."""

    def __init__(self, name: str, width: int, size: int):
        if width not in _DTYPES:
            raise ValueError(f"register {name}: unsupported width {width}")
        self.name, self.width, self.size = name, width, size
        self.data = np.zeros(size, dtype=_DTYPES[width])

    def _check(self, index: int) -> None:
        if not 0 <= index < self.size:
            raise StateError("INVALID_INDEX")

    def read(self, index: int) -> int:
        self._check(index)
        return int(self.data[index])

    def write(self, index: int, value: int) -> None:
        """BMv2 keeps the low W bits of a written value; so do we."""
        self._check(index)
        self.data[index] = value & ((1 << self.width) - 1)

    def reset(self) -> None:
        self.data[:] = 0


class CounterArray:
    """`counter(size, ...) name;` — packets and bytes per index, as BMv2 keeps both."""

    def __init__(self, name: str, size: int):
        self.name, self.size = name, size
        self.packets = np.zeros(size, dtype=np.uint64)
        self.bytes = np.zeros(size, dtype=np.uint64)

    def count(self, index: int, nbytes: int) -> None:
        self.packets[index] += 1
        self.bytes[index] += nbytes

    def read(self, index: int) -> tuple[int, int]:
        """(packets, bytes) at index."""
        if not 0 <= index < self.size:
            raise StateError("INVALID_INDEX")
        return int(self.packets[index]), int(self.bytes[index])

    def reset(self) -> None:
        self.packets[:] = 0
        self.bytes[:] = 0
