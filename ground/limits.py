"""Kernel limits a large run needs raised, as Mininet's `fixLimits` raises the file and ARP
limits a large network needs.

Why: every thread is a pid, and Debian's default `kernel.pid_max` is 32,768. A sharded
parameter server runs four threads per peer in every worker (hosts/ps.py), so 128 workers
need 65,280 of them: the first worker past the limit failed with "can't start new thread".
"""

from __future__ import annotations

from pathlib import Path

PID_MAX = Path("/proc/sys/kernel/pid_max")
PID_MAX_CEILING = 4_194_304          # the kernel's own upper limit on 64-bit machines
MARGIN = 4096                        # pids for everything else that starts meanwhile


def tasks_now(loadavg: Path = Path("/proc/loadavg")) -> int:
    """Threads and processes that exist now (the kernel's count, /proc/loadavg's 4th field)."""
    return int(loadavg.read_text().split()[3].split("/")[1])


def ensure_pid_room(threads: int, path: Path = PID_MAX, existing: int | None = None) -> str | None:
    """Raise kernel.pid_max when `threads` more would not fit beside the tasks that exist;
    a line that says what was done (or why it could not be), None when there is room. It is
    not lowered after the run: another run may be using the room by then."""
    current = int(path.read_text())
    need = (tasks_now() if existing is None else existing) + threads + MARGIN
    if need <= current:
        return None
    new = min(PID_MAX_CEILING, max(2 * need, 65_536))
    try:
        path.write_text(f"{new}\n")
    except OSError as exc:
        return (f"this run's workers need about {threads:,} threads but kernel.pid_max is {current:,} "
                f"and could not be raised ({exc.strerror}): sysctl -w kernel.pid_max={new}")
    return (f"raised kernel.pid_max from {current:,} to {new:,}: this run's workers need about "
            f"{threads:,} threads (left raised after the run)")
