"""The live page of an open network (`agglab lab --web`, `agglab allreduce --web`).

`state.py` samples what the page shows (links and their byte counters, trees, switch
counters and slots, workers' progress, events) in a thread of its own; `server.py` serves
the page, its assets (cytoscape.js, shipped in static/: no CDN, works offline), a stream
of those samples (server-sent events) and the actions (agglab/actions.py, the lab's own),
on the loopback only unless told otherwise, behind a one-time token.
"""

from __future__ import annotations

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
    """{"host", "port"} when --web was given (or --web-host/--web-port), else None."""
    if not (args.web or args.web_host or args.web_port):
        return None
    if not 0 <= args.web_port <= 65535:
        raise ValueError(f"--web-port must be 0..65535, got {args.web_port}")
    return {"host": args.web_host or LOOPBACK, "port": args.web_port}
