"""The live page's server without a network: the token, the loopback, the shipped assets, the
stream and the action routing (to a recording stand-in for agglab/actions.py)."""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request

import pytest

from agglab.web import LOOPBACK, web_options
from agglab.web.server import STATIC, WebServer


class FakeState:
    lab = True
    topology = {"nodes": [], "links": [], "switches": [], "lab": True, "name": "t", "palette": []}

    def __init__(self):
        self.latest, self.seq, self.changed = json.dumps({"t": 1, "n": 0}), 1, threading.Condition()

    def stop(self):
        pass


class FakeActions:
    def __init__(self):
        self.calls = []

    def link(self, a, b, up):
        self.calls.append(("link", a, b, up))
        if a == "x":
            raise ValueError("no link x-y")
        return f"link {a}-{b} {'up' if up else 'down'}"

    def switch(self, name, up):
        self.calls.append(("switch", name, up))
        return "killed " + name


@pytest.fixture
def server():
    s = WebServer(FakeState(), FakeActions(), LOOPBACK, 0).start()
    yield s
    s.stop()


def _get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as exc:
        return exc.code, b""


def _post(server, body: dict) -> dict:
    """The action's JSON answer (a refusal comes with 400: agglab/web/server.py)."""
    req = urllib.request.Request(f"http://{LOOPBACK}:{server.port}/api/action?token={server.token}",
                                 data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return json.loads(r.read())
    except urllib.error.HTTPError as exc:
        assert exc.code == 400, exc.code
        return json.loads(exc.read())


def test_token_is_required_everywhere(server):
    base = f"http://{LOOPBACK}:{server.port}"
    for path in ("/", "/api/state", "/api/topology", "/static/cytoscape.min.js", "/api/stream"):
        assert _get(base + path)[0] == 403, path
        assert _get(base + path + "?token=wrong")[0] == 403, path
    status, body = _get(server.url)
    assert status == 200 and server.token.encode() in body         # the page carries it to its requests
    status, body = _get(f"{base}/static/cytoscape.min.js?token={server.token}")
    assert status == 200 and body == (STATIC / "cytoscape.min.js").read_bytes()   # shipped, not a CDN's
    assert b"cdn" not in (STATIC / "index.html").read_bytes().lower()
    assert _get(f"{base}/static/..%2Fserver.py?token={server.token}")[0] == 404


def test_stream_sends_samples(server):
    with urllib.request.urlopen(f"http://{LOOPBACK}:{server.port}/api/stream?token={server.token}", timeout=10) as r:
        assert r.headers["Content-Type"] == "text/event-stream"
        line = r.readline()
    assert json.loads(line.decode().removeprefix("data: ")) == {"t": 1, "n": 0}


def test_actions_reach_the_lab_actions(server):
    assert _post(server, {"do": "fail", "a": "a1", "b": "c1"}) == {"ok": True, "message": "link a1-c1 down"}
    assert _post(server, {"do": "recover", "a": "a1", "b": "c1"})["message"] == "link a1-c1 up"
    assert _post(server, {"do": "kill", "switch": "a1"})["message"] == "killed a1"
    assert _post(server, {"do": "fail", "a": "x", "b": "y"}) == {"ok": False, "message": "no link x-y"}
    assert _post(server, {"do": "nonsense"})["ok"] is False
    assert server.actions.calls == [("link", "a1", "c1", False), ("link", "a1", "c1", True), ("switch", "a1", False),
                                    ("link", "x", "y", False)]


def _request(server, path: str, headers: dict, body: dict | None = None) -> tuple[int, bytes]:
    req = urllib.request.Request(f"http://{LOOPBACK}:{server.port}{path}", headers=headers,
                                 data=None if body is None else json.dumps(body).encode())
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def test_an_action_from_another_origin_is_refused_even_with_the_token(server):
    own = f"http://{LOOPBACK}:{server.port}"
    path = f"/api/action?token={server.token}"
    body = {"do": "kill", "switch": "a1"}
    json_type = {"Content-Type": "application/json"}
    for origin in ("http://evil.example", "null", f"http://{LOOPBACK}:{server.port + 1}", f"https://{LOOPBACK}:{server.port}"):
        status, text = _request(server, path, {**json_type, "Origin": origin}, body)
        assert (status, text) == (403, b"403: an action must come from this page\n"), origin
    assert server.actions.calls == []
    assert _request(server, path, {**json_type, "Origin": own}, body)[0] == 200     # the page's own fetch
    assert server.actions.calls == [("switch", "a1", False)]


def test_a_dns_rebinding_name_is_refused(server, monkeypatch):
    """A page at rebind.example whose name later resolves to 127.0.0.1 sends Host: rebind.example."""
    port = server.port
    for path in ("/", f"/?token={server.token}", f"/api/state?token={server.token}"):
        status, text = _request(server, path, {"Host": f"rebind.example:{port}"})
        assert status == 403 and b"not served under the name 'rebind.example:" in text, path
    status, _ = _request(server, f"/api/action?token={server.token}",
                         {"Host": f"rebind.example:{port}", "Content-Type": "application/json"},
                         {"do": "kill", "switch": "a1"})
    assert status == 403 and server.actions.calls == []
    for host in (f"localhost:{port}", f"127.0.0.1:{port}", f"[::1]:{port}"):
        assert _request(server, f"/api/state?token={server.token}", {"Host": host})[0] == 200, host


def test_names_the_user_allows(monkeypatch):
    from agglab.web.server import HOSTS_ENV, allowed_names, host_allowed

    assert not host_allowed("lab.example.org:8080", allowed_names("0.0.0.0"))
    assert host_allowed("lab.example.org:8080", allowed_names("lab.example.org"))    # --web-host NAME
    monkeypatch.setenv(HOSTS_ENV, "Lab.Example.org, other.example")
    assert host_allowed("lab.example.org:8080", allowed_names("0.0.0.0"))
    assert host_allowed("other.example", allowed_names("0.0.0.0"))
    assert not host_allowed("", allowed_names("0.0.0.0"))
    assert not host_allowed("a.b:notaport:1", allowed_names("0.0.0.0"))


def test_actions_are_post_only_and_the_token_is_never_logged(server, caplog):
    import logging

    caplog.set_level(logging.DEBUG)
    assert _get(f"http://{LOOPBACK}:{server.port}/api/action?token={server.token}")[0] == 405
    assert _get(server.url)[0] == 200
    assert _get(f"http://{LOOPBACK}:{server.port}/api/nothing?token={server.token}")[0] == 404
    assert _post(server, {"do": "fail", "a": "a1", "b": "c1"})["ok"]
    assert server.token not in caplog.text


def test_loopback_unless_told():
    class Args:
        web, web_host, web_port = True, None, 0
    assert web_options(Args) == {"host": LOOPBACK, "port": 0}
    Args.web_host = "0.0.0.0"
    assert web_options(Args)["host"] == "0.0.0.0"
    Args.web, Args.web_host = False, None
    assert web_options(Args) is None


def test_the_page_lists_events_in_words_with_the_raw_fields_beside():
    """The event list reads as the lab prints it; the raw fields travel along for the page's
    tooltip and its "raw fields" toggle."""
    from types import SimpleNamespace

    from agglab.controller.events import EventLog
    from agglab.web.state import LiveState

    log = EventLog()
    log.add("standby_ready", t=log.t0 + 1.5, algorithm="rat", failures=39, ms=2342.3)
    log.add("no_such_kind", t=log.t0 + 2, x=1)
    events = LiveState._events(SimpleNamespace(session=SimpleNamespace(events=log)))
    assert [e["text"] for e in events] == [
        "    1.500s  standby trees ready for 39 single failures (rat), computed in 2342.3 ms",
        "    2.000s  no_such_kind       x=1"]
    assert events[0]["raw"] == "standby_ready      algorithm=rat failures=39 ms=2342.3"
    assert [e["kind"] for e in events] == ["standby_ready", "no_such_kind"]
