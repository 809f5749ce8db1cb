"""The live page of an open network (`agglab lab --web`, `agglab allreduce --web`).

`state.py` samples what the page shows (links and their byte counters, trees, switch
counters and slots, workers' progress, events) in a thread of its own; `server.py` serves
the page, its assets (cytoscape.js, shipped in static/: no CDN, works offline), a stream
of those samples (server-sent events) and the actions (agglab/actions.py, the lab's own),
on the loopback only unless told otherwise, behind a one-time token.
"""

from __future__ import annotations

import errno
import socket

LOOPBACK = "127.0.0.1"


def add_web_options(parser) -> None:
    """--web, --web-host, --web-port, for every command that can serve the page."""
    parser.add_argument("--web", action="store_true",
                        help="serve a live page of the network (topology, trees, link load, counters, events; "
                             "click a link to fail it) on the loopback; its URL with a one-time token is printed")
    parser.add_argument("--web-host", default=None, metavar="ADDRESS",
                        help=f"with --web: the address to listen on (default {LOOPBACK}); anything else exposes "
                             "the page (and its buttons) to that network")
    parser.add_argument("--web-port", type=int, default=0, metavar="PORT",
                        help="with --web: the port (default: a free one)")


def web_options(args) -> dict | None:
    """{"host", "port"} when --web was given (or --web-host/--web-port), else None; ValueError
    (one line) for an address or port the page cannot listen on, said before any network is
    built rather than after."""
    if not (args.web or args.web_host or args.web_port):
        return None
    if not 0 <= args.web_port <= 65535:
        raise ValueError(f"--web-port must be 0..65535, got {args.web_port}")
    web = {"host": args.web_host or LOOPBACK, "port": args.web_port}
    check_listen(**web)
    return web


def check_listen(host: str, port: int) -> None:
    """Bind (and close) a socket where the page will listen, as the server does (SO_REUSEADDR,
    aiohttp's default); ValueError with one line naming the option if that fails. Port 0 (a free
    one) checks the address only."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        raise ValueError(f"--web-host {host}: not an address of this machine ({exc})") from None
    family, kind, proto, _, address = infos[0]
    with socket.socket(family, kind, proto) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(address)
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise ValueError(f"--web-port {port}: already in use on {host} (give another, or 0 for a free "
                                 "one)") from None
            if exc.errno == errno.EACCES:
                raise ValueError(f"--web-port {port}: ports below 1024 need root (give one above 1023, or 0 "
                                 "for a free one)") from None
            if exc.errno == errno.EADDRNOTAVAIL:
                raise ValueError(f"--web-host {host}: not an address of this machine") from None
            raise ValueError(f"--web-host {host} --web-port {port}: cannot listen there ({exc.strerror or exc})") \
                from None
