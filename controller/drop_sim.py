"""Programs p4src/include/drop_sim.p4: the in-switch loss simulator.

This kernel has no netem, so loss is emulated in the data plane (as SwitchML's
drop simulator does) and therefore works identically on BMv2 and the software switch.
"""

from __future__ import annotations

from agglab.controller.switch_client import SwitchClient, table_add_line


def threshold(probability: float) -> int:
    """Drop when random r in [0, 2^32-2] is below this (0 never, 0xFFFFFFFF always)."""
    if not 0.0 <= probability <= 1.0:
        raise ValueError(f"loss probability must be within [0, 1], got {probability}")
    return min(0xFFFFFFFF, round(probability * 2**32))


def set_losses(client: SwitchClient, losses: dict[int, float]) -> None:
    """Per port its own drop probability, both ways (ports not named: no loss). Replaces
    every earlier setting of the switch."""
    client.commands(loss_lines(losses))


def loss_lines(losses: dict[int, float]) -> list[str]:
    """set_losses as command lines (one batch; the session sends every switch's at once)."""
    thresholds = {p: threshold(prob) for p, prob in losses.items()}
    lines = []
    for table in ("drop_sim", "drop_sim_egress"):
        lines.append(f"table_clear {table}")
        lines += [table_add_line(table, "set_drop_rate", [p], [thr]) for p, thr in sorted(thresholds.items()) if thr]
    return lines
