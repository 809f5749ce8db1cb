"""What an emulation can leave behind: used by tests to prove nothing is."""

from __future__ import annotations

import os
import subprocess

from agglab.ground import netns
from agglab.ground.rundir import stray_interfaces


def our_processes() -> list[str]:
    """Processes of ours still running (software switches, workers, Mininet host shells, a
    network's liveness probe)."""
    out = subprocess.run(["pgrep", "-fa", r"-m agglab.softswitch|-m agglab\.hosts\.worker|mininet:[a-z]+[0-9]+|simple_switch "
                          r"|-m agglab\.emulation\.probe_process"],
                         capture_output=True, text=True).stdout
    return [line for line in out.splitlines() if "pgrep" not in line]


def named_namespaces() -> list[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return [line.split()[0] for line in out.splitlines() if line.strip()]


def ours(namespace: str) -> bool:
    """agglab's namespaces, except another process's conformance or software-switch lab
    namespaces: a conformance module keeps one for all its vectors, and agglab.softswitch.scratchnet networks
    (daemon tests, `make bench`'s daemon section) run outside the network lock, so another
    checkout's may exist while this one runs. Ours are still counted."""
    from agglab.softswitch import scratchnet
    from agglab.testkit import netns

    if not namespace.startswith("agglab"):
        return False
    for module in (netns, scratchnet):
        if namespace.startswith(module.PREFIX):
            return namespace in module.CREATED_HERE
    return True


def _ancestors(pid: int) -> set[int]:
    seen = set()
    while pid > 1 and pid not in seen:
        seen.add(pid)
        try:
            pid = int(open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            break
    return seen


def others_live_runs() -> tuple[set[str], set[int], set[int]]:
    """(interfaces, pids, owners) of the runs alive now that this process did not start: on a
    machine shared with other checkouts (or a web session that builds networks outside the
    tests' lock), their networks are not this test's leftovers."""
    from agglab.ground.paths import RUN_ROOT
    from agglab.ground.rundir import RunRecord

    mine = os.getpid()
    names, pids, owners = set(), set(), set()
    for path in sorted(RUN_ROOT.iterdir()) if RUN_ROOT.exists() else []:
        try:
            owner = int((path / "owner.pid").read_text())
        except (OSError, ValueError):
            continue
        run = RunRecord(path)
        if run.owner_alive() and mine not in _ancestors(owner):
            names |= set(run.interfaces())
            pids |= set(run.pids())
            owners.add(owner)
    return names, pids, owners


def leftovers() -> dict[str, list[str]]:
    names, pids, owners = others_live_runs()

    def theirs(line: str) -> bool:
        pid = int(line.split()[0])
        return pid in pids or bool(_ancestors(pid) & owners)
    return {"interfaces": [i for i in stray_interfaces() if i not in names],
            "processes": [p for p in our_processes() if not theirs(p)],
            "namespaces": [n for n in named_namespaces() if ours(n) and netns.owner_of(n) not in owners]}


# What existed when the running network test began (tests/conftest.py sets it): assert_clean
# then counts only what appeared since, not another checkout's namespaces or networks.
BASELINE: dict[str, list[str]] | None = None


def assert_clean() -> None:
    left = new_leftovers(BASELINE) if BASELINE is not None else leftovers()
    assert not any(left.values()), f"left behind: {left}"


def new_leftovers(before: dict[str, list[str]]) -> dict[str, list[str]]:
    """What is left now that was not there `before` (leftovers() taken when the test began):
    a test checks only what its own command left, not another checkout's concurrent test
    namespaces (the conformance and scratchnet tests name theirs agglab-*)."""
    return {k: sorted(set(v) - set(before.get(k, []))) for k, v in leftovers().items()}
