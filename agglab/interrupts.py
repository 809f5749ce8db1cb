"""SIGINT, SIGTERM and SIGHUP stop any agglab command the same clean way: see ground/interrupts.py
(shared with `python -m experiments`, which `agglab experiment` execs)."""

from ground.interrupts import HANDLED, Interrupted, arm, interrupted_line, run_interruptible, signum_of

__all__ = ["HANDLED", "Interrupted", "arm", "interrupted_line", "run_interruptible", "signum_of"]
