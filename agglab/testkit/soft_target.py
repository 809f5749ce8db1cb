"""The software switch as a conformance target: a fresh Pipeline per vector, no I/O.

Why the same interface as the BMv2 target: one runner (test_conformance.py)
drives both, so a vector can never be checked differently on the two.
"""

from __future__ import annotations

import numpy as np

from agglab.ground import wire

from agglab.softswitch.pipeline import Pipeline


class SoftTarget:
    """batch=True: every frame goes in as a one-frame receive batch, through
    Pipeline.process_batch where it takes it and process where it declines, as the daemon
    does (so the vectors are the contract of the batched path too)."""
    name = "soft"

    def __init__(self, batch: bool = False, native: bool = False):
        """native=True: every frame goes in through the C engine (softswitch/native.py) where
        it takes it and through process where it declines."""
        self.pipeline = Pipeline(seed=1)
        self.batch, self.native = batch, native
        self.batched = 0                  # frames process_batch took

    def reset(self, ports: set[int]) -> None:
        self.pipeline = Pipeline(seed=1)

    def commands(self, lines: list[str]) -> list[str]:
        """Answers in order; a refused command raises agglab.softswitch.cli.CommandError."""
        return [self.pipeline.command(line) for line in lines]

    def inject(self, port: int, frame: bytes, expected: int) -> list[tuple[int, bytes]]:
        """Everything the switch emits for `frame`, in the pipeline's (deterministic) order."""
        if self.native and len(frame) >= wire.FRAME_BYTES:
            lens = np.array([len(frame)], np.uint32)
            taken, _drops = self.pipeline.native.run(port, frame, max(len(frame), 1), lens, 0, 1)
            if taken:
                self.batched += 1
                return self.pipeline.native.engine.take()
        elif self.batch:
            got = self.pipeline.process_batch(port, np.frombuffer(frame, np.uint8)[None, :],
                                              np.array([len(frame)], np.uint32))
            if got is not None:
                self.batched += 1
                return [(eport, bytes(row)) for eport, rows in got[0] for row in rows]
        return self.pipeline.process(port, frame)

    def close(self) -> None:
        pass
