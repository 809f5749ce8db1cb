"""The live page's HTTP server (aiohttp, in a thread with its own event loop).

Routes, every one behind the token (`?token=...`, or the `X-Agglab-Token` header; anything
else gets 403, as Jupyter's token does) and behind two checks Jupyter makes as well: the `Host`
a request names must be an IP address, `localhost`, or a name the user allowed (`--web-host
NAME`, AGGLAB_WEB_HOSTS): a DNS-rebinding page reaches the port under a domain of its own; and
a POST's `Origin`, when the browser sends one, must be this page's own (a page elsewhere that
somehow holds the token still cannot press the buttons). The token is never logged (no access
log: it travels in the query string).
  GET  /                 the page (static/index.html)
  GET  /static/NAME      its script, style and cytoscape.js (shipped here: works offline)
  GET  /api/topology     nodes with their tiered positions, links, switches (once)
  GET  /api/state        the latest sample (agglab/web/state.py)
  GET  /api/stream       server-sent events: every new sample (~4 per second)
  POST /api/action       {"do": "fail"|"recover", "a", "b"} | {"do": "kill"|"restart", "switch"}
                         | {"do": "allreduce", "elements", "algorithm", "tree"} | {"do": "cancel"}
                         -> {"ok", "message"}: agglab/actions.py, the lab's own code paths
  POST /api/command      {"line": "fail a1 c1"} -> {"ok", "output"}: one of the lab's own commands,
                         its output for the page only (agglab/lab_console.py); refused -> 400,
                         the terminal busy -> 409, with one line

Why a thread: the lab's prompt (Mininet's CLI) owns the main thread. Closing the page only
ends its stream; `stop()` (the lab's clean-up, on exit or Ctrl-C) ends the server.
"""

from __future__ import annotations

import asyncio
import ipaddress
import os
import secrets
import sys
import threading
import urllib.parse
from pathlib import Path

from aiohttp import web

from agglab.actions import Actions, summary
from agglab.lab_console import Busy, Refused
from agglab.web.state import PERIOD, LiveState
from agglab.ground.netns import root_server_socket

STATIC = Path(__file__).resolve().parent / "static"
TOKEN_HEADER = "X-Agglab-Token"
HOSTS_ENV = "AGGLAB_WEB_HOSTS"      # comma-separated names the page may be reached by


def allowed_names(host: str) -> frozenset[str]:
    """The names besides IP addresses and localhost that a request's Host may give: the
    listening address when it is a name, and AGGLAB_WEB_HOSTS."""
    names = {n.strip().lower() for n in os.environ.get(HOSTS_ENV, "").split(",") if n.strip()}
    if not _is_address(host):
        names.add(host.lower())
    return frozenset(names)


def _is_address(name: str) -> bool:
    try:
        ipaddress.ip_address(name.strip("[]"))
        return True
    except ValueError:
        return False


def host_allowed(host_header: str, names: frozenset[str]) -> bool:
    """Whether a request's Host header names this page by an address, localhost or an allowed name."""
    try:
        name = urllib.parse.urlsplit("//" + host_header).hostname
    except ValueError:
        return False
    return bool(name) and (name == "localhost" or _is_address(name) or name in names)


class WebServer:
    def __init__(self, state: LiveState, actions: Actions, host: str, port: int, summarise=None, console=None):
        self.state, self.actions, self.console = state, actions, console
        self.host, self.port = host, port
        self.token = secrets.token_urlsafe(24)
        self.names = allowed_names(host)
        self.summarise = summarise
        self.loop: asyncio.AbstractEventLoop | None = None
        self.runner: web.AppRunner | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._closing = False

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/?token={self.token}"

    # -- life cycle ---------------------------------------------------------------------
    def start(self) -> "WebServer":
        self._thread = threading.Thread(target=self._serve, daemon=True, name="web-server")
        self._thread.start()
        self._ready.wait(30)
        if self._error is not None:
            raise RuntimeError(f"the live page could not listen on {self.host}:{self.port}: {self._error}")
        return self

    def _serve(self) -> None:
        self.loop = asyncio.new_event_loop()
        asyncio.set_event_loop(self.loop)
        try:
            self.runner = web.AppRunner(self._app(), handle_signals=False, access_log=None)
            self.loop.run_until_complete(self.runner.setup())
            # made in the machine's namespace: the run's own (ground/netns.py) is not reachable
            site = web.SockSite(self.runner, root_server_socket(self.host, self.port))
            self.loop.run_until_complete(site.start())
            self.port = self.runner.addresses[0][1]
        except BaseException as exc:      # noqa: BLE001 - reported by start()
            self._error = exc
            self._ready.set()
            return
        self._ready.set()
        self.loop.run_forever()
        self.loop.run_until_complete(self.runner.cleanup())
        self.loop.close()

    def stop(self) -> None:
        self._closing = True
        self.state.stop()
        with self.state.changed:
            self.state.changed.notify_all()
        if self.loop is not None and self._thread is not None and self._thread.is_alive():
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(10)

    # -- the app --------------------------------------------------------------------------
    def _app(self) -> web.Application:
        app = web.Application(middlewares=[self._guard])
        app.router.add_get("/", self._index)
        app.router.add_get("/static/{name}", self._static)
        app.router.add_get("/api/topology", self._topology)
        app.router.add_get("/api/state", self._state)
        app.router.add_get("/api/stream", self._stream)
        app.router.add_post("/api/action", self._action)
        app.router.add_post("/api/command", self._command)
        return app

    @web.middleware
    async def _guard(self, request: web.Request, handler):
        if not host_allowed(request.host, self.names):
            return web.Response(status=403, text=f"403: this page is not served under the name {request.host!r} "
                                                 f"(reach it by its address, or allow the name: {HOSTS_ENV})\n")
        origin = request.headers.get("Origin")
        if request.method != "GET" and origin is not None and origin != f"{request.scheme}://{request.host}":
            return web.Response(status=403, text="403: an action must come from this page\n")
        given = request.query.get("token") or request.headers.get(TOKEN_HEADER) or ""
        if not secrets.compare_digest(given.encode(), self.token.encode()):
            return web.Response(status=403, text="403: this page needs the token printed with its URL\n")
        return await handler(request)

    async def _index(self, request: web.Request) -> web.Response:
        html = (STATIC / "index.html").read_text().replace("{{TOKEN}}", self.token)
        return web.Response(text=html, content_type="text/html", headers={"Cache-Control": "no-store"})

    async def _topology(self, request: web.Request) -> web.Response:
        return web.json_response(self.state.topology)

    async def _state(self, request: web.Request) -> web.Response:
        return web.Response(text=self.state.latest, content_type="application/json")

    async def _static(self, request: web.Request) -> web.StreamResponse:
        name = request.match_info["name"]
        path = STATIC / name
        if "/" in name or name.startswith(".") or not path.is_file():
            raise web.HTTPNotFound()
        return web.FileResponse(path)

    async def _stream(self, request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-store"})
        await resp.prepare(request)
        seen = -1
        try:
            while not self._closing:
                if self.state.seq != seen:
                    seen = self.state.seq
                    await resp.write(f"data: {self.state.latest}\n\n".encode())
                await asyncio.sleep(PERIOD / 5)
        except (ConnectionResetError, asyncio.CancelledError):
            pass                      # the page was closed: the lab goes on
        return resp

    async def _action(self, request: web.Request) -> web.Response:
        """Bad JSON or a refused action: 400 with the one line that says why (the page shows
        it); an action that failed otherwise: 500 with its first line, never a traceback."""
        try:
            body = await request.json()            # JSONDecodeError and UnicodeDecodeError are ValueErrors
        except ValueError:
            body = None
        if not isinstance(body, dict):
            return web.json_response({"ok": False, "message": 'expected a JSON object, e.g. {"do": "fail", '
                                      '"a": "e1", "b": "a1"}'}, status=400)
        try:
            message = await asyncio.get_running_loop().run_in_executor(None, self._do, body)
            return web.json_response({"ok": True, "message": message})
        except ValueError as exc:
            return web.json_response({"ok": False, "message": _line(exc)}, status=400)
        except Exception as exc:      # noqa: BLE001 - the page shows one line; the lab goes on
            return web.json_response({"ok": False, "message": f"{body.get('do')} failed: {_line(exc)}"}, status=500)

    async def _command(self, request: web.Request) -> web.Response:
        """One typed line through the lab's command line, in a worker thread (`wait` blocks
        until the allreduce ends; the page's event loop goes on)."""
        try:
            body = await request.json()
        except ValueError:
            body = None
        if self.console is None:
            return web.json_response({"ok": False, "message": "this page has no command line (open it with "
                                      "`agglab lab --web`)"}, status=400)
        if not isinstance(body, dict) or not isinstance(body.get("line"), str):
            return web.json_response({"ok": False, "message": 'expected {"line": "a lab command"}'}, status=400)
        try:
            output = await asyncio.get_running_loop().run_in_executor(None, self.console.run, body["line"])
            return web.json_response({"ok": True, "output": output})
        except Refused as exc:                    # not a lab command
            return web.json_response({"ok": False, "message": _line(exc)}, status=400)
        except Busy as exc:                       # the terminal runs one
            return web.json_response({"ok": False, "message": _line(exc)}, status=409)
        except Exception as exc:      # noqa: BLE001 - the page shows one line; the lab goes on
            return web.json_response({"ok": False, "message": f"command failed: {_line(exc)}"}, status=500)

    def _do(self, body: dict) -> str:
        """One action through agglab/actions.py (a worker thread: they block)."""
        what = body.get("do")
        a = self.actions
        if what in ("fail", "recover"):
            return a.link(str(body.get("a")), str(body.get("b")), up=what == "recover")
        if what in ("kill", "restart"):
            return a.switch(str(body.get("switch")), up=what == "restart")
        if what == "cancel":
            return a.cancel() or "allreduce cancelled"
        if what == "allreduce":
            if not self.state.lab:
                raise ValueError("this page belongs to one `agglab allreduce`; open `agglab lab --web` to start more")
            opts = {}
            try:
                if body.get("elements"):
                    opts["elements"] = int(body["elements"])
            except (TypeError, ValueError, OverflowError):
                raise ValueError(f"elements must be a whole number, got {body.get('elements')!r}") from None
            for key in ("algorithm", "tree", "dtype"):
                if body.get(key):
                    opts[key] = str(body[key])
            return a.allreduce(opts, self.summarise)
        raise ValueError(f"unknown action {what!r}")


def _line(exc: Exception) -> str:
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


def serve(session, actions: Actions, host: str, port: int = 0, lab: bool = True, console=None) -> WebServer:
    """Start sampling `session` and serving its page; returns the running server (stop() it)."""
    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = host == "localhost"
    if not loopback:
        print(f"warning: the live page listens on {host}: anyone who reaches it there with the token can fail "
              "links and kill switches", file=sys.stderr)
    state = LiveState(session, actions, lab=lab).start()
    try:
        return WebServer(state, actions, host, port, summarise=summary, console=console).start()
    except BaseException:
        state.stop()
        raise


def run_with_page(spec, web: dict, quiet: bool, progress: bool) -> dict:
    """`agglab allreduce --web`: one allreduce in a fresh network, with its live page served
    from the moment the network is up until the run ends."""
    from agglab.emulation.session import Session  # lazy: loads numpy, PyYAML, pyroute2, only run_with_page() needs it

    with Session(spec, quiet=quiet, progress=progress) as session:
        actions = Actions(session, say=lambda line: print(line, file=sys.stderr))
        server = serve(session, actions, lab=False, **web)
        print(f"live page: {server.url}", file=sys.stderr, flush=True)
        try:
            result = actions.run_here(session.allreduce)
            result["events"] = session.events.lines()
            return result
        finally:
            server.stop()
