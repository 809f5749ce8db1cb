"""Learn of a switch process's death at once: a pidfd per switch, one thread polling them.

Why not `proc.poll()` after the run: a switch that dies mid-allreduce (a crash, `kill -9`,
`--fail-switch`) is a failure of every link it has, and the controller must reroute
around it while the workers still wait, within milliseconds. netlink says nothing here:
the veths of a dead process stay up. A pidfd (Linux >= 5.3, os.pidfd_open) becomes
readable when the process exits, so one poll() over all of them wakes the moment any
switch dies, with no polling interval to wait out.
"""

from __future__ import annotations

import os
import select
import subprocess
import threading
import time
from typing import Callable

ExitCallback = Callable[[str, int, float], None]     # (switch, exit code, monotonic time seen)


class SwitchWatcher:
    """Calls `on_exit(name, returncode, t)` (in its own thread) when a watched process exits."""

    def __init__(self, on_exit: ExitCallback):
        self.on_exit = on_exit
        self._poll = select.poll()
        self._lock = threading.Lock()
        self._fds: dict[int, tuple[str, subprocess.Popen]] = {}
        self._wake_r, self._wake_w = os.pipe()
        self._poll.register(self._wake_r, select.POLLIN)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="switch-watcher", daemon=True)

    def start(self) -> "SwitchWatcher":
        self._thread.start()
        return self

    def add(self, name: str, proc: subprocess.Popen) -> None:
        """Watch `proc` (a child of this process) as switch `name`."""
        try:
            fd = os.pidfd_open(proc.pid)
        except ProcessLookupError:            # already gone (and maybe reaped): report at once
            threading.Thread(target=self.on_exit, args=(name, proc.poll() or -1, time.monotonic()),
                             daemon=True).start()
            return
        with self._lock:
            self._fds[fd] = (name, proc)
            self._poll.register(fd, select.POLLIN)
        os.write(self._wake_w, b"x")

    def _run(self) -> None:
        while not self._stop.is_set():
            for fd, _ev in self._poll.poll():
                if fd == self._wake_r:
                    os.read(self._wake_r, 4096)
                    continue
                t = time.monotonic()
                with self._lock:
                    name, proc = self._fds.pop(fd, (None, None))
                    self._poll.unregister(fd)
                os.close(fd)
                if name is None or self._stop.is_set():
                    continue
                code = proc.wait()                 # exited: reaps it, returns at once
                self.on_exit(name, code, t)

    def stop(self) -> None:
        """Stop watching (teardown stops the switches on purpose); closes every pidfd."""
        self._stop.set()
        os.write(self._wake_w, b"x")
        self._thread.join(2)
        with self._lock:
            for fd in list(self._fds):
                os.close(fd)
            self._fds.clear()
        for fd in (self._wake_r, self._wake_w):
            try:
                os.close(fd)
            except OSError:
                pass
