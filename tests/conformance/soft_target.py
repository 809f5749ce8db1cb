"""The software switch as a conformance target: a fresh Pipeline per vector, no I/O.

Why the same interface as the BMv2 target: one runner (test_conformance.py)
drives both, so a vector can never be checked differently on the two.
"""

from __future__ import annotations

from softswitch.pipeline import Pipeline


class SoftTarget:
    name = "soft"

    def __init__(self):
        self.pipeline = Pipeline(seed=1)

    def reset(self, ports: set[int]) -> None:
        self.pipeline = Pipeline(seed=1)

    def commands(self, lines: list[str]) -> list[str]:
        """Answers in order; a refused command raises softswitch.cli.CommandError."""
        return [self.pipeline.command(line) for line in lines]

    def inject(self, port: int, frame: bytes, expected: int) -> list[tuple[int, bytes]]:
        """Everything the switch emits for `frame`, in the pipeline's (deterministic) order."""
        return self.pipeline.process(port, frame)

    def close(self) -> None:
        pass
