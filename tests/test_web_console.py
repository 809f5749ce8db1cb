"""The live page's command line (POST /api/command, agglab/lab_console.py) without a network:
the real LabCLI and server on a stand-in session (tests/test_lab_output.py's). A shell or
Mininet command is refused with one line; a lab command's output goes to the page and not to
the terminal, while what other threads print meanwhile still goes to the terminal; the page
waits its turn behind a terminal command (409 when it stays busy); a `wait` runs off the
page's event loop and answers with the allreduce's outcome.

agglab.lab subclasses Mininet's CLI: the marker-free tests skip without Mininet's Python."""

from __future__ import annotations

import json
import sys
import threading
import urllib.error
import urllib.request

import pytest

from agglab.testkit.waits import wait_until
from agglab.web import LOOPBACK
from agglab.web.server import WebServer
from tests.test_lab_output import _session
from tests.test_web_server import FakeState

pytest.importorskip("mininet.cli")

RESULT = {"exact": True, "elements": 1000, "dtype": "int32", "workers": 2, "seconds": 0.5, "retransmissions": 0,
          "epoch": 0, "loss": 0.0}


@pytest.fixture
def page():
    """(server, session): the page's server with a command line on a stand-in session, whose
    allreduce blocks until `session.release` is set. Each test opens the console itself
    (`_open`): pytest sets sys.stdout back to its capture when the test's call begins."""
    from agglab.actions import Actions
    from agglab.lab import LabCLI
    from agglab.lab_console import PageConsole

    release = threading.Event()

    def allreduce(**opts):
        release.wait(60)
        return dict(RESULT)

    session = _session(allreduce=allreduce)
    session.release = release
    actions = Actions(session, say=print)             # the terminal's say, as run_lab gives it
    console = PageConsole(LabCLI, session, actions, [])
    server = WebServer(FakeState(), actions, LOOPBACK, 0, console=console).start()
    yield server, session
    release.set()
    server.stop()
    console.close()


def _open(page):
    """The console wraps the sys.stdout capsys reads: the lab's terminal, for these tests."""
    page[0].console.open()
    return page


def _command(server, line, raw: bytes | None = None) -> tuple[int, dict]:
    req = urllib.request.Request(f"http://{LOOPBACK}:{server.port}/api/command?token={server.token}",
                                 data=raw if raw is not None else json.dumps({"line": line}).encode(),
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=90) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


@pytest.mark.parametrize("line", ["h1 ping -c1 h2", "sh ls /", "py net.hosts", "xterm h1", "!ls", "px import os",
                                  "dump", "source /etc/passwd", "exit", "EOF", "  ", "fail a1 c1\nsh ls"])
def test_anything_but_a_lab_command_is_refused_with_one_line(page, capsys, line):
    server, session = _open(page)
    status, answer = _command(server, line)
    assert status == 400 and answer["ok"] is False, (status, answer)
    assert answer["message"] and "\n" not in answer["message"], answer
    if line.strip() and "\n" not in line:
        assert answer["message"].startswith(line.split()[0] + ":"), answer     # names what was refused
    assert session.changes == []                            # nothing ran, not even the first line
    assert capsys.readouterr().out == ""


def test_bad_requests_are_one_line(page):
    server, _ = _open(page)
    for raw in (b"not json", b"[1, 2]", json.dumps({"line": 3}).encode(), json.dumps({}).encode()):
        status, answer = _command(server, None, raw=raw)
        assert status == 400 and "\n" not in answer["message"], (raw, status, answer)
    base = f"http://{LOOPBACK}:{server.port}/api/command"
    assert _status(urllib.request.Request(f"{base}?token=wrong", data=b'{"line": "help"}')) == 403
    assert _status(urllib.request.Request(f"{base}?token={server.token}", data=b'{"line": "help"}',
                                          headers={"Origin": "http://evil.example"})) == 403
    assert _status(urllib.request.Request(f"{base}?token={server.token}")) == 405        # GET: POST only


def _status(req) -> int:
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status
    except urllib.error.HTTPError as exc:
        return exc.code


def test_a_page_command_prints_on_the_page_only(page, capsys):
    from agglab.lab import say

    server, session = _open(page)
    set_link = session.net.set_link

    def set_link_and_echo(a, b, up):
        # event lines said while the page's command runs, by another thread and by the lab's
        # say in the command's own thread: the terminal's
        echo = threading.Thread(target=lambda: print(f"[event] link {a}-{b} went down (another thread)"))
        echo.start()
        echo.join()
        say(f"[event] link {a}-{b} went down (said in the command's thread)")
        return set_link(a, b, up)

    session.net.set_link = set_link_and_echo
    status, answer = _command(server, "fail a1 c1")
    assert (status, answer) == (200, {"ok": True, "output": "link a1-c1 down"})
    assert session.changes == [("a1", "c1", False)]
    status, answer = _command(server, "fail a1")             # the lab's own usage line, to the page
    assert status == 200 and answer["output"].startswith("usage: fail A B"), answer
    status, answer = _command(server, "events")
    assert status == 200 and answer["output"] == "  no events yet", answer
    terminal = capsys.readouterr().out
    assert terminal == ("[event] link a1-c1 went down (another thread)\n"
                        "[event] link a1-c1 went down (said in the command's thread)\n"), terminal
    assert sys.stdout is server.console.sinks                   # the terminal's own prints still pass through it
    print("typed at the terminal")
    assert capsys.readouterr().out == "typed at the terminal\n"


def test_help_lists_the_lab_commands_only(page):
    server, _ = _open(page)
    status, answer = _command(server, "help")
    assert status == 200, answer
    listed = {line.split()[0] for line in answer["output"].splitlines()[1:]}
    assert {"allreduce", "fail", "recover", "kill", "restart", "trees", "slots", "stats", "jobs", "events", "wait",
            "progress", "cancel", "show", "help"} <= listed, listed
    assert not listed & {"sh", "py", "px", "xterm", "x", "dump", "net", "nodes", "source", "exit", "EOF"}, listed
    status, answer = _command(server, "help fail")
    assert status == 200 and answer["output"].startswith("fail A B: take link A-B down"), answer
    status, answer = _command(server, "show /tmp/x.svg")      # no file written from the page
    assert status == 200 and answer["output"].startswith("show FILE writes a file"), answer


def test_the_page_waits_its_turn_behind_the_terminal(page):
    from agglab.lab import LabCLI

    server, session = _open(page)
    held, done = threading.Event(), threading.Event()

    def terminal_command():
        with LabCLI.lock:
            held.set()
            done.wait(60)

    t = threading.Thread(target=terminal_command)
    t.start()
    try:
        assert held.wait(30)
        status, answer = _command(server, "fail a1 c1")
        assert status == 409 and "terminal" in answer["message"] and "\n" not in answer["message"], answer
        assert session.changes == []
    finally:
        done.set()
        t.join(30)
    assert _command(server, "fail a1 c1") == (200, {"ok": True, "output": "link a1-c1 down"})


def test_wait_runs_off_the_event_loop_and_answers_with_the_outcome(page, capsys):
    server, session = _open(page)
    assert _command(server, "allreduce 1000") == (200, {"ok": True, "output": "allreduce started in the background"})
    answers = []
    waiting = threading.Thread(target=lambda: answers.append(_command(server, "wait")))
    waiting.start()
    try:
        # while `wait` blocks, the page still answers (its event loop is free): another command
        # is told that one runs ...
        wait_until(lambda: _command(server, "progress")[0] == 409, 60, "the page's `wait` to hold the lab")
        assert not answers
    finally:
        session.release.set()                               # ... and the allreduce ends
        waiting.join(90)
    assert answers and answers[0][0] == 200, answers
    assert answers[0][1]["output"].startswith("allreduce: exact, 1000 int32 x 2 workers"), answers
    # its outcome was said by the allreduce's own thread: on the terminal, as for one typed there
    assert capsys.readouterr().out.startswith("allreduce: exact")
