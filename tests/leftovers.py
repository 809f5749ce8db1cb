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


def ours(namespace: str) -> bool:
    """agglab's namespaces, except another process's conformance namespace: a conformance
    module keeps one for all its vectors, so with AGGLAB_NET_LOCK another checkout's suite
    holds one between its tests, while this one runs. Ours are still counted."""
    from tests.conformance.netns import CREATED_HERE, PREFIX

    if not namespace.startswith("agglab"):
        return False
    return not namespace.startswith(PREFIX) or namespace in CREATED_HERE


def leftovers() -> dict[str, list[str]]:
    return {"interfaces": stray_interfaces(), "processes": our_processes(),
            "namespaces": [n for n in named_namespaces() if ours(n)]}


def assert_clean() -> None:
    left = leftovers()
    assert not any(left.values()), f"left behind: {left}"


def new_leftovers(before: dict[str, list[str]]) -> dict[str, list[str]]:
    """What is left now that was not there `before` (leftovers() taken when the test began):
    a test checks only what its own command left, not another checkout's concurrent test
    namespaces (the conformance and netlab tests name theirs agglab-*)."""
    return {k: sorted(set(v) - set(before.get(k, []))) for k, v in leftovers().items()}
