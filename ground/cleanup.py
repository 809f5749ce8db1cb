"""`agglab clean`: remove what crashed runs left (processes, interfaces, run directories).

Why a module of its own, above ground/rundir.py, ground/netns.py and ground/netlease.py:
cleaning reads the run records (rundir), deletes a dead run's network namespace (netns) and
must leave alone the interfaces of an older agglab's network holding the machine's lease
(netlease), while the lease keeps its file in a directory rundir checks (`secure_dir`); so
the lease imports rundir, and only this module imports them all.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from agglab.ground import netnames, netns
from agglab.ground.netlease import holder_elsewhere
from agglab.ground.paths import RUN_ROOT
from agglab.ground.rundir import (MAKING, RunRecord, alive, delete_interfaces, delete_link_group, group_of, kill_pids,
                           secure_dir, stray_interfaces)

LEGACY_RUN_ROOT = Path("/tmp/agglab-run")
OWNER_GRACE = 20.0        # seconds a live run's owner has to take its own network down on SIGTERM


def _legacy_live_run() -> str | None:
    """A live run of an older agglab, which kept its runs in /tmp/agglab-run and holds no
    lease, if there is one (read only to spare its interfaces: nothing there is trusted or
    deleted)."""
    try:
        entries = list(os.scandir(LEGACY_RUN_ROOT))
    except OSError:
        return None
    for e in entries:
        if e.is_dir(follow_symlinks=False) and RunRecord(Path(e.path)).owner_alive():
            return f"an older agglab's run in {e.path}"
    return None


@dataclass(frozen=True)
class LiveRun:
    """A run whose owner process is alive: what `agglab clean --all` would stop."""
    path: Path
    owner: int
    command: str                   # the owner's command line, as ps shows it
    processes: int                 # the processes it recorded that still run

    def line(self) -> str:
        return f"{self.path.name}: owner pid {self.owner} (`{self.command}`), {self.processes} process(es) it started"


def live_runs() -> list[LiveRun]:
    """Every run under the run root whose owner is alive, by directory name."""
    if not os.path.lexists(RUN_ROOT):
        return []
    secure_dir(RUN_ROOT)
    with os.scandir(RUN_ROOT) as entries:
        paths = sorted(Path(e.path) for e in entries if e.is_dir(follow_symlinks=False)
                       and not e.name.startswith(MAKING))
    found = []
    for path in paths:
        run = RunRecord(path)
        if run.owner_alive():
            owner = _owner(path)
            if owner is None:                  # it ended (and its directory went) meanwhile
                continue
            found.append(LiveRun(path, owner, _command_of(owner), sum(1 for p in run.pids() if alive(p))))
    return found


def _owner(path: Path) -> int | None:
    try:
        return int((path / "owner.pid").read_text())
    except (OSError, ValueError):
        return None


def _command_of(pid: int) -> str:
    try:
        words = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").split()
    except OSError:
        return "?"
    line = " ".join(words) or "?"                # one line, however the command was spelled
    return line if len(line) <= 100 else line[:99] + "…"


def orphan_namespaces() -> list[netnames.Found]:
    """The namespaces agglab named (ground/netnames.py) whose creating process is gone: what
    a killed run, test or bench left with no run directory recording it. Never one whose
    creator is alive (a test running now), one whose name does not say who made it (an older
    agglab's), a practice cluster's server, or one agglab did not name."""
    return [f for f in netnames.survey() if f.owner is not None and f.owner != os.getpid() and not alive(f.owner)]


def unknown_namespaces() -> list[netnames.Found]:
    """agglab's namespaces named before the creator's pid was in the name: left alone, and said."""
    return [f for f in netnames.survey() if f.owner is None and f.kind.owned]


def _remove_netns(name: str | None) -> int:
    """Stop what still runs in agglab's namespace `name` and delete it (its interfaces go with
    it); returns how many processes were stopped. Never this process (a run that lives in it)."""
    if not name or netnames.owner_of(name) is None:
        return 0
    stopped = kill_pids(netns.pids_in(name))
    netns.delete(name)
    return stopped


def clean(everything: bool = False, verbose: bool = True, stop: set[Path] | None = None) -> dict[str, int]:
    """Remove what dead runs left (all runs with everything=True), their network namespaces
    (ground/netns.py) too, and any namespace agglab named (ground/netnames.py: a run's of
    another run root, a killed conformance test's, a software-switch lab's) whose creating
    process is gone though no run directory records it. Idempotent.

    A live run (its owner process alive) is left alone, unless everything=True and it is one
    of `stop` (None: every live run): its owner is sent SIGTERM first (its own clean-up runs),
    then the processes it recorded; this returns only once they are gone (ground/rundir.py's
    kill_pids waits on each process). `stop` is the list a person was shown and agreed to, so
    a run that started since is not stopped unasked. Interfaces only named like ours,
    which no run directory records, are removed only with everything=True (`--all`), and
    even then not while another process holds the machine's network lease
    (ground/netlease.py) or an older agglab's run is live, and only those in an interface
    group (every pair agglab makes has both ends in one; a hand-made `s1-eth1` is in
    group 0). Why so careful: a run this process cannot see (another mount namespace's
    /run, an older agglab's /tmp/agglab-run) may own them, and deleting a live network's
    interfaces takes every link of it down. The run root is checked first
    (secure_dir) and walked without following symlinks; rmtree removes a verified real
    directory (Python's rmtree works on directory fds and does not follow symlinks in it)."""
    done = {"runs": 0, "processes": 0, "interfaces": 0, "namespaces": 0}
    live = 0
    if os.path.lexists(RUN_ROOT):
        secure_dir(RUN_ROOT)
        with os.scandir(RUN_ROOT) as entries:
            paths = sorted(Path(e.path) for e in entries if e.is_dir(follow_symlinks=False))
        for path in paths:
            if path.name.startswith(MAKING):         # being created (rundir.RunRecord.create)
                pid = path.name[len(MAKING):].split("-", 1)[0]
                if pid.isdigit() and not alive(int(pid)):
                    shutil.rmtree(path, ignore_errors=True)
                continue
            run = RunRecord(path)
            if run.owner_alive():
                if not everything or (stop is not None and path not in stop):
                    live += 1
                    continue
                owner = _owner(path)
                done["processes"] += kill_pids([owner] if owner else [], grace=OWNER_GRACE)
            done["processes"] += kill_pids(run.pids())
            done["processes"] += _remove_netns(run.netns())
            names = run.interfaces()
            group = run.recorded_link_group()
            present = sum(1 for n in names if group and group_of(n) == group)
            delete_link_group(group or 0)    # all at once; by name only what is still in the run's group
            delete_interfaces(names, group=group or -1)
            done["interfaces"] += present
            if not os.path.islink(path):
                shutil.rmtree(path, ignore_errors=True)
            done["runs"] += 1
    gone = []
    for found in orphan_namespaces():       # agglab's namespaces whose maker is gone, and no record of them
        done["processes"] += _remove_netns(found.name)
        if found.kind is netnames.RUN:
            done["runs"] += 1
        else:
            done["namespaces"] += 1
            gone.append(found.name)
    unknown = [f.name for f in unknown_namespaces()]
    other = holder_elsewhere() or _legacy_live_run()
    if everything and live == 0 and other is None:   # asked for: interfaces no run records
        done["interfaces"] += delete_interfaces([n for n in stray_interfaces() if group_of(n)])
    if verbose:
        print(f"agglab clean: removed {done['runs']} run(s), stopped {done['processes']} process(es), "
              f"deleted {done['interfaces']} interface(s)" + (f"; {live} live run(s) left alone" if live else "")
              + (f"; the network of {other} left alone" if other else "")
              + (f"; removed {len(gone)} namespace(s) whose maker is gone ({', '.join(gone)})" if gone else "")
              + (f"; left alone {len(unknown)} namespace(s) of an older agglab whose maker is unknown "
                 f"({', '.join(unknown)}: `ip netns del NAME` once nothing uses it)" if unknown else ""))
    return done
