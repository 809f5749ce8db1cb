"""Learn of link failures from netlink, within milliseconds.

Why netlink and not polling: Mininet's `link a b down` only takes the veths down;
neither BMv2 nor a controller is told. Every switch interface lives in the root
namespace, so one RTNLGRP_LINK subscription there sees every carrier/admin change
the moment the kernel makes it, and we map the interface to its graph edge.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Callable

from pyroute2 import IPRoute
from pyroute2.netlink.rtnl import RTMGRP_LINK

from agglab.ground.priority import URGENT_RT, raise_thread_priority, real_time

IFF_UP = 0x1
IFF_RUNNING = 0x40

LinkCallback = Callable[[str, bool, float], None]   # (ifname, up, monotonic time seen)


def _is_up(flags: int, operstate: str | None) -> bool:
    return bool(flags & IFF_UP) and operstate not in ("DOWN", "LOWERLAYERDOWN")


def _sysfs_up(name: str) -> bool | None:
    """An interface's state as a link message would give it, from /sys (None: no such
    interface). Why not netlink's dump: parsing every link of a k=8 fat-tree's root
    namespace (550) in Python took 0.15-0.3 s of each start-up; these are two reads each."""
    base = Path("/sys/class/net") / name
    try:
        return _is_up(int((base / "flags").read_text(), 16), (base / "operstate").read_text().strip().upper())
    except (OSError, ValueError):
        return None


class LinkMonitor:
    """Calls `callback(ifname, up, t)` whenever one of `ifnames` changes state."""

    def __init__(self, ifnames: set[str], callback: LinkCallback):
        self.ifnames = set(ifnames)
        self.callback = callback
        self.state: dict[str, bool] = {}
        self._ipr: IPRoute | None = None
        self._ready = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="link-monitor", daemon=True)

    def start(self) -> "LinkMonitor":
        """Subscribe and take the current state; returns once events are being watched."""
        self._thread.start()
        if not self._ready.wait(5):
            raise RuntimeError("netlink link monitor did not start")
        return self

    def _update(self, msg) -> None:
        name = msg.get_attr("IFLA_IFNAME")
        if name not in self.ifnames:
            return
        if msg["event"] == "RTM_DELLINK":
            up = False
        else:
            up = _is_up(msg["flags"], msg.get_attr("IFLA_OPERSTATE"))
        self._set(name, up)

    def _set(self, name: str, up: bool, announce: bool = True) -> None:
        if self.state.get(name) != up:
            self.state[name] = up
            if announce:
                self.callback(name, up, time.monotonic())

    def _run(self) -> None:
        # it sleeps in recv; on an event it wakes and reroutes at once: real time where allowed
        # (ground/priority.py: at any niceness the wake-up waited its turn behind ~30 busy
        # sessions, 2-25 ms), else ahead of the rest of this process
        if real_time(0, URGENT_RT) is None:
            raise_thread_priority()
        # pyroute2 >= 0.9 binds a socket to the thread that made it: make it here.
        with IPRoute() as ipr:
            self._ipr = ipr
            ipr.bind(groups=RTMGRP_LINK)
            for name in self.ifnames:        # after bind: a change from now on is an event
                up = _sysfs_up(name)
                if up is not None:
                    self._set(name, up, announce=False)
            self._ready.set()
            self._loop(ipr)

    def _loop(self, ipr: IPRoute) -> None:
        while not self._stop.is_set():
            try:
                for msg in ipr.get():
                    self._update(msg)
            except OSError:
                if self._stop.is_set():
                    return
                raise

    def stop(self) -> None:
        """Stop watching. The thread is a daemon blocked in recv; it ends with the process
        or at the next link event."""
        self._stop.set()
