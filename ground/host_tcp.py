"""The emulated hosts' TCP: pinned in every host namespace, and read back for every run's record.

Why: the TCP of an emulated host is part of the emulated network, not of the machine. Yet a
new network namespace starts with the root namespace's congestion control and tcp_rmem /
tcp_wmem (the kernel copies init_net's when it creates one), so unpinned the TCP baselines'
times depended on the machine agglab ran on (docs/measurements.md, eighth session: BBR and
an 87,380-byte first receive buffer on the development machine). Every host's set-up script
(emulation/host_setup.py) pins Linux's own defaults (Documentation/networking/ip-sysctl.rst):
cubic, tcp_rmem 4096 131072 6291456, tcp_wmem 4096 16384 4194304. The initial windows stay
the kernel's (10 segments; no route sets initcwnd/initrwnd). Every other TCP sysctl of a new
namespace is the kernel's default already (it is not copied from the root namespace).

Why the congestion control goes on the routes (`congctl`): a namespace other than the root
one may only make an algorithm of net.ipv4.tcp_allowed_congestion_control its default (EPERM
otherwise; on the development machine only reno and bbr), while a route's `congctl` takes any
algorithm the kernel has. The namespace default is written too, where that is allowed, for
connections over routes the set-up does not write (loopback).

The read-back (`READ_LINES`, `parse`) runs at the end of the same script, in the host's
namespace: what the run's JSON says is what the hosts had, not what was asked for.
"""

from __future__ import annotations

import re

CONGESTION_CONTROLS = ("cubic", "reno", "bbr")    # what --tcp-cc offers (cubic: Linux's default)
DEFAULT_CC = "cubic"
TCP_RMEM = "4096 131072 6291456"                   # min, default, max bytes: Linux's defaults
TCP_WMEM = "4096 16384 4194304"
KERNEL_INITCWND = "kernel default (10 segments)"   # what a route without initcwnd starts with

_MARK = "agglab-host-tcp"
_ROUTE_MARK = "agglab-host-route"
_SYS = "/proc/sys/net/ipv4"
_ROUTE_OPTIONS = ("congctl", "rto_min", "initcwnd", "initrwnd")


def check_cc(cc: str) -> str:
    if cc not in CONGESTION_CONTROLS:
        raise ValueError(f"unknown TCP congestion control {cc!r}; choose one of {CONGESTION_CONTROLS}")
    return cc


def sysctl_lines(cc: str = DEFAULT_CC) -> list[str]:
    """Shell lines (under `set -e`) pinning the namespace's buffers and, where the kernel lets
    a namespace choose it, its default congestion control (the routes carry it anyway)."""
    check_cc(cc)
    return [f"echo '{TCP_RMEM}' > {_SYS}/tcp_rmem", f"echo '{TCP_WMEM}' > {_SYS}/tcp_wmem",
            f"(echo {cc} > {_SYS}/tcp_congestion_control) 2>/dev/null || true"]


# Shell lines printing what the namespace has: one line of sysctls, one per route of the
# main table.
READ_LINES = [
    f"printf '{_MARK} %s|%s|%s\\n' \"$(cat {_SYS}/tcp_congestion_control)\" \"$(cat {_SYS}/tcp_rmem)\" "
    f"\"$(cat {_SYS}/tcp_wmem)\"",
    f"ip route show | sed 's/^/{_ROUTE_MARK} /'",
]


def _options(route: str) -> dict[str, str]:
    words = [w for w in route.split() if w != "lock"]       # `congctl lock cubic`: the value follows
    return {w: words[i + 1] for i, w in enumerate(words[:-1]) if w in _ROUTE_OPTIONS}


def parse(out: str) -> dict | None:
    """One host's read-back from its script's output: the congestion control its TCP
    connections get (the routes' `congctl`, else the namespace default; several joined by
    '+'), the buffers, the initial window and the routes' TCP options. None if absent."""
    head = re.search(rf"^{_MARK} (.*)\|(.*)\|(.*)$", out, re.M)
    if not head:
        return None
    default, rmem, wmem = (" ".join(v.split()) for v in head.groups())
    routes = [line[len(_ROUTE_MARK) + 1:].strip() for line in out.splitlines() if line.startswith(_ROUTE_MARK + " ")]
    opts = [_options(r) for r in routes]
    ccs = sorted({o.get("congctl", default) for o in opts} or {default})
    cwnds = sorted({o["initcwnd"] for o in opts if "initcwnd" in o})
    shown = sorted({" ".join(f"{k} {v}" for k, v in o.items()) for o in opts} - {""})
    return {"congestion_control": "+".join(ccs), "namespace_default_cc": default, "tcp_rmem": rmem,
            "tcp_wmem": wmem, "initcwnd": "+".join(cwnds) if cwnds else KERNEL_INITCWND,
            "route_options": shown}


def summary(per_host: dict[str, dict | None]) -> dict:
    """The run's record: the hosts' common settings and how many hosts had them, or every
    host's own when they differ."""
    values = list(per_host.values())
    if values and all(v == values[0] for v in values) and values[0] is not None:
        return {**values[0], "hosts": len(values)}
    return {"differ": True, "per_host": per_host}
