"""Benchmark sweeps for agglab: configs, runner, report and plots.

Why a package of its own: the experiments only *drive* the emulator through one
function, `emulation.session.run_allreduce`, so they can be tested without Mininet,
root or a switch by injecting a fake, and the emulator can change underneath
without touching how results are collected and reported.

Run it as `python -m experiments --config experiments/configs/default.yaml`.
"""

from experiments.config import Config, ConfigError, Point, load_config

__all__ = ["Config", "ConfigError", "Point", "load_config"]
