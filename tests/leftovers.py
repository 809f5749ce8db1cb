"""What an emulation can leave behind: used by tests to prove nothing is."""

from __future__ import annotations

import subprocess

from ground.rundir import stray_interfaces


def our_processes() -> list[str]:
    """Processes of ours still running (software switches, workers, Mininet host shells)."""
    out = subprocess.run(["pgrep", "-fa", r"-m softswitch|-m hosts\.worker|mininet:[a-z]+[0-9]+|simple_switch "],
                         capture_output=True, text=True).stdout
    return [line for line in out.splitlines() if "pgrep" not in line]


def named_namespaces() -> list[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return [line.split()[0] for line in out.splitlines() if line.strip()]


def leftovers() -> dict[str, list[str]]:
    return {"interfaces": stray_interfaces(), "processes": our_processes(),
            "namespaces": [n for n in named_namespaces() if n.startswith("agglab")]}


def assert_clean() -> None:
    left = leftovers()
    assert not any(left.values()), f"left behind: {left}"


def new_leftovers(before: dict[str, list[str]]) -> dict[str, list[str]]:
    """What is left now that was not there `before` (leftovers() taken when the test began):
    a test checks only what its own command left, not another checkout's concurrent test
    namespaces (the conformance and netlab tests name theirs agglab-*)."""
    return {k: sorted(set(v) - set(before.get(k, []))) for k, v in leftovers().items()}
