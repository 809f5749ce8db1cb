"""Run one conformance vector on a target: the runner the tests and `agglab exercise check` share.

Why one runner for both targets: the vectors are the contract that the P4 program and the
software switch implement the same thing. Per vector: program the switch with the vector's
CLI lines, inject each frame and compare everything emitted (port and exact bytes) with the
expectation, then read registers and counters through the CLI (so the CLI answers are part
of the contract too). A mismatch raises AssertionError naming the first differing field.
"""

from __future__ import annotations

import re

from agglab.ground import wire
from agglab.testkit.frames import describe, first_difference
from agglab.testkit.vectors import Vector

_REG = re.compile(r"(\w+)\[(\d+)\]=\s*(\d+)")
_CTR = re.compile(r"(\w+)\[(\d+)\]=\s*(?:BmCounterValue\(packets=(\d+)|\((\d+) bytes, (\d+) packets\))")


def _show(frames: list[tuple[int, bytes]]) -> str:
    return "\n".join(f"    port {p}: {describe(f)}" for p, f in frames) or "    (nothing)"


_STAT_NAMES = {v: k for k, v in wire.CONST.items() if k.startswith("STAT_")}


def _cells(bad: dict) -> str:
    """The differing cells in words: `agg_exp[5] expected 140, got 135`; agg_stats by STAT_ name."""
    def cell(name, i):
        stat = f" ({_STAT_NAMES[i]})" if name == "agg_stats" and i in _STAT_NAMES else ""
        return f"{name}[{i}]{stat}"
    shown = "; ".join(f"{cell(*k)} expected {v}, got {g}" for k, (v, g) in list(bad.items())[:4])
    return shown + (f"; and {len(bad) - 4} more" if len(bad) > 4 else "")


def _parse(answers: list[str], counter: bool) -> dict[tuple[str, int], int]:
    found = {}
    for answer in answers:
        for m in (_CTR if counter else _REG).finditer(answer):
            value = (m.group(3) or m.group(5)) if counter else m.group(3)
            found[(m.group(1), int(m.group(2)))] = int(value)
    return found


def read_state(target, registers: list[tuple[str, int]], counters: list[tuple[str, int]]
               ) -> tuple[dict[tuple[str, int], int], dict[tuple[str, int], int]]:
    """Registers (register_read) and counters' packet counts (counter_read), all in one
    target.commands() call: on BMv2 each call is a simple_switch_CLI process to start, and
    almost every vector reads both."""
    lines = [f"register_read {name} {i}" for name, i in registers] + \
            [f"counter_read {name} {i}" for name, i in counters]
    answers = target.commands(lines)
    state = (_parse(answers[:len(registers)], False), _parse(answers[len(registers):], True))
    for cells, found, verb in ((registers, state[0], "register_read"), (counters, state[1], "counter_read")):
        missing = [c for c in cells if c not in found]
        assert not missing, f"{verb} gave no value for {missing}: {answers}"
    return state


def run_vector(target, vector: Vector, ordered: bool) -> None:
    target.reset(vector.ports)
    lines = [line for line, _ in vector.commands]
    for (line, pattern), answer in zip(vector.commands, target.commands(lines)):
        if pattern:
            assert re.search(pattern, answer), f"{line!r} answered {answer!r}, expected /{pattern}/"
    for n, step in enumerate(vector.steps, start=1):
        got = target.inject(step.port, step.frame, len(step.expect))
        want = step.expect
        if not ordered:
            got, want = sorted(got), sorted(want)
        assert got == want, (f"{vector.name}: packet {n} on port {step.port}: "
                             f"{first_difference(want, got)}\n  sent:\n"
                             f"{_show([(step.port, step.frame)])}\n  expected:\n{_show(want)}\n"
                             f"  got:\n{_show(got)}")
    regs, ctrs = read_state(target, list(vector.registers), list(vector.counters))
    if vector.registers:
        bad = {k: (v, regs[k]) for k, v in vector.registers.items() if regs[k] != v}
        assert not bad, f"{vector.name}: registers (expected, got): {bad}\n  {_cells(bad)}"
    if vector.counters:
        bad = {k: (v, ctrs[k]) for k, v in vector.counters.items() if ctrs[k] != v}
        assert not bad, f"{vector.name}: counters (expected, got): {bad}\n  {_cells(bad)}"
