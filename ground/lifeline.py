"""Children die with their parent: PR_SET_PDEATHSIG for every process agglab starts.

Why: a parent that is killed outright (kill -9, an OOM kill, a CI runner cancelling pytest)
runs no clean-up, and its software switches, simple_switch processes and workers used to
keep running (start_new_session: no terminal signal reaches them), holding ports, CPU and
BMv2's Thrift ports until someone ran `agglab clean`. With PR_SET_PDEATHSIG the kernel
sends them SIGKILL the moment their parent goes; the interfaces and run directory are still
`agglab clean`'s (or the next run's) to remove.

The kernel's "parent" here is the *thread* that forked the child: a child started from a
thread that ends before it would be killed then. So `preexec()` sets the death signal only
from the main thread, unless the caller says the child never outlives its spawning thread
(`bound_to_thread=True`: a worker the same thread waits for). It is preserved across execve
(mnexec, simple_switch) and cleared by fork, so the switch launcher sets it again in each
child it forks (`die_with_parent`).
"""

from __future__ import annotations

import ctypes
import os
import signal
import threading
from typing import Callable

PR_SET_PDEATHSIG = 1


def die_with_parent(parent: int | None = None, sig: int = signal.SIGKILL) -> bool:
    """In a child: ask the kernel for `sig` when the parent (thread) exits. With `parent`
    (the parent's pid taken before the fork) die at once if it is already gone (the race
    between fork and prctl). False where prctl is unavailable."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0) != 0:
            return False
    except (OSError, AttributeError):
        return False
    if parent is not None and os.getppid() != parent:
        os.kill(os.getpid(), sig)
    return True


def preexec(bound_to_thread: bool = False, then: Callable[[], None] | None = None) -> Callable[[], None] | None:
    """A Popen `preexec_fn` that makes the child die with this process (then runs `then`,
    a preexec_fn the caller already had); `then` alone when the death signal cannot be tied
    to this process (not the main thread, and the child may outlive its spawning thread)."""
    if not bound_to_thread and threading.current_thread() is not threading.main_thread():
        return then
    parent = os.getpid()

    def child() -> None:
        die_with_parent(parent)
        if then is not None:
            then()

    return child
