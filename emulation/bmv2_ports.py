"""Taking a BMv2 port away and back without hanging simple_switch.

Two BMv2 facts shape a link failure on the bmv2 backend (both measured with BMv2 1.15.5 on
Debian 12, see docs/design/failures.md "Link failures on BMv2"):
1. an interface that is administratively down blocks simple_switch's one receive thread inside
   libpcap, silencing every port of the switch, so a switch's end must leave the switch
   (`port_remove`) before its link goes down and come back (`port_add`) after it is up;
2. `port_remove`/`port_add` deadlock under traffic: BMI's port manager (src/BMI/bmi_port.c)
   holds its write lock while it waits for the receive thread to echo a byte over a socket
   pair, and a receive thread that has packets to handle is waiting for that lock instead.
   It only succeeds when the receive thread sits idle in select().
So the emulator pauses the traffic sources (the processes in the hosts' namespaces: workers)
with SIGSTOP, waits until the switches' interfaces stop counting packets, changes the ports,
and lets the sources go on. The pause lasts the drain (typically 50-200 ms) plus the Thrift calls.

Counters that stopped are a guess, not the event: a packet is counted when it reaches the
interface, before simple_switch's receive thread reads it, and on a loaded 2-core machine that
thread can wait longer than the 50 ms settle for a CPU with packets still to read. Nor is an
idle switch safe at any instant: the receive thread (bmi_port.c run_select) leaves select() every
100 ms and takes the port manager's read lock before it selects again; a port_remove whose write
lock comes first waits for an echo that thread can no longer give. Either way the Thrift call
never returns and ends at the client's CALL_TIMEOUT as `TTransportException: unexpected
exception` (inner `TimeoutError('timed out')`: Thrift only names errno ETIMEDOUT a timeout).
So before each port change the network also waits for the event itself: the switch's receive
thread asleep inside select() (/proc/PID/task/*/syscall), the one place where it answers.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path


def processes_in_netns(shell_pids: list[int]) -> list[int]:
    """Every process sharing a network namespace with one of `shell_pids`, the shells excluded."""
    spaces = set()
    for pid in shell_pids:
        with contextlib.suppress(OSError):
            spaces.add(os.stat(f"/proc/{pid}/ns/net").st_ino)
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) in shell_pids or int(entry.name) == os.getpid():
            continue
        with contextlib.suppress(OSError):
            if os.stat(f"/proc/{entry.name}/ns/net").st_ino in spaces:
                found.append(int(entry.name))
    return found


def packet_count(interfaces: list[str]) -> int:
    """rx + tx packets of root-namespace interfaces (gone ones count 0)."""
    total = 0
    for name in interfaces:
        for key in ("rx_packets", "tx_packets"):
            with contextlib.suppress(OSError, ValueError):
                total += int(Path(f"/sys/class/net/{name}/statistics/{key}").read_text())
    return total


def wait_idle(interfaces: list[str], settle: float = 0.05, limit: float = 2.0) -> float:
    """Wait until the interfaces' counters stay still for `settle` seconds (at most `limit`);
    returns the seconds waited."""
    start = time.monotonic()
    last, still_since = packet_count(interfaces), time.monotonic()
    while time.monotonic() - start < limit:
        time.sleep(0.01)
        now = packet_count(interfaces)
        if now != last:
            last, still_since = now, time.monotonic()
        elif time.monotonic() - still_since >= settle:
            break
    return time.monotonic() - start


def stop(pids: list[int], stopped: list[int] | None = None) -> list[int]:
    """SIGSTOP the pids; the ones stopped, appended to `stopped` as they are (a signal in
    between leaves nothing stopped unrecorded; a cluster server's agent keeps them for `resume`)."""
    stopped = [] if stopped is None else stopped
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGSTOP)
            stopped.append(pid)
    return stopped


def resume(pids: list[int]) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)


@contextlib.contextmanager
def sources_paused(pids: list[int]):
    """SIGSTOP the pids for the duration of the block; SIGCONT them whatever happens."""
    stopped = []
    try:
        yield stop(pids, stopped)
    finally:
        resume(stopped)


# select() and pselect6() per machine: simple_switch's receive thread is its only thread in one
# (glibc's select() is pselect6 on x86-64 Debian 12; its Thrift and other threads poll or wait
# on futexes)
SELECT_SYSCALLS = {"x86_64": {"23", "270"}, "aarch64": {"72"}}


def receive_thread_asleep(pid: int) -> bool | None:
    """True when a thread of process `pid` sleeps inside select() (BMv2: its receive thread,
    idle: a port change now is answered); None where that cannot be read (another machine
    kind, the process gone)."""
    numbers = SELECT_SYSCALLS.get(os.uname().machine)
    if numbers is None:
        return None
    readable = False
    for entry in _tasks(pid):
        try:
            with open(f"/proc/{pid}/task/{entry}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
            with open(f"/proc/{pid}/task/{entry}/syscall") as f:
                number = f.read().split(" ", 1)[0]
        except (OSError, IndexError):
            continue
        readable = True
        if number in numbers and state == "S":
            return True
    return False if readable else None


def _tasks(pid: int) -> list[str]:
    try:
        return os.listdir(f"/proc/{pid}/task")
    except OSError:
        return []


def wait_receive_asleep(pid: int | None, limit: float = 2.0) -> bool:
    """Wait (at most `limit` s) until switch process `pid`'s receive thread sleeps in select();
    whether it did (False also where it cannot be seen: the caller goes on as before)."""
    if pid is None:
        return False
    end = time.monotonic() + limit
    while True:
        asleep = receive_thread_asleep(pid)
        if asleep or asleep is None or time.monotonic() > end:
            return bool(asleep)
        time.sleep(0.001)

