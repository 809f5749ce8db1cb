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
    req = urllib.request.Request(f"http://{LOOPBACK}:{server.port}/api/action?token={server.token}",
                                 data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as r:
        return json.loads(r.read())


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


def test_loopback_unless_told():
    class Args:
        web, web_host, web_port = True, None, 0
    assert web_options(Args) == {"host": LOOPBACK, "port": 0}
    Args.web_host = "0.0.0.0"
    assert web_options(Args)["host"] == "0.0.0.0"
    Args.web, Args.web_host = False, None
    assert web_options(Args) is None
