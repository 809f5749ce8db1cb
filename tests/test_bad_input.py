"""Bad input on every surface is one clear line and exit 2, never a traceback: a survey of
bad inputs by hand, kept. Each case was a traceback, a usage block, or a run that started on input it
should have refused (then the network stopped it later, or never).

The CLI runs in-process (agglab.cli.main; `agglab experiment` through agglab.experiments.cli.main,
which it execs). No case may reach a network: the point where a valid command would begin
one (ground/netlease.py's refuse_if_busy, the first thing a Session does) raises instead.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from agglab.cli import main

REPO = Path(__file__).resolve().parent.parent

BROKEN_YAML = "nodes:\n  switches: [s1]\n  hosts: [h1, h2]\nlinks:\n  - [h1, s1]\n  - [h2, s1\n"


class ReachedNetwork(BaseException):
    """A command got as far as building a network (a BaseException: no `except Exception`
    on the way may swallow it)."""


@pytest.fixture(autouse=True)
def no_network(monkeypatch, tmp_path):
    def refuse(*args, **kwargs):
        raise ReachedNetwork()

    monkeypatch.setattr("agglab.ground.netlease.refuse_if_busy", refuse)
    monkeypatch.chdir(tmp_path)


def exit_code(argv: list[str]) -> int:
    """`agglab ARGV`'s exit code, as the program would exit (argparse's refusals raise SystemExit)."""
    try:
        return main(argv)
    except SystemExit as exc:
        return exc.code


@pytest.fixture
def files(tmp_path):
    (tmp_path / "broken.yaml").write_text(BROKEN_YAML)
    (tmp_path / "binary.yaml").write_bytes(b"\xff\xfe\x00bad")
    (tmp_path / "list.yaml").write_text("- 3\n- [a]\n")
    (tmp_path / "notes.txt").write_text("a file, not a directory\n")
    (tmp_path / "adir").mkdir()
    (tmp_path / "class" / "student1").mkdir(parents=True)
    return tmp_path


CASES = [
    # argparse: one line, not the usage block
    (["allreduce", "--workers", "abc"], "agglab allreduce: argument --workers: invalid int value: 'abc'"),
    (["allreduce", "--dtype", "int8"], "agglab allreduce: argument --dtype: invalid choice: 'int8'"),
    (["allreduce", "--nosuchoption"], "agglab: unrecognized arguments: --nosuchoption"),
    (["allreduce", "--job-loss", "abc"], "expected comma-separated probabilities"),
    (["allreduce", "--jobs", "2", "--placement", "diagonal"], "invalid choice: 'diagonal'"),
    (["lab", "--chaos", "abc"], "agglab lab: argument --chaos: invalid int value: 'abc'"),
    (["nosuchcommand"], "agglab: argument cmd: invalid choice: 'nosuchcommand'"),
    (["draw"], "agglab draw: the following arguments are required: TOPOLOGY, -o/--output"),
    (["cluster"], "agglab cluster: the following arguments are required: cluster_cmd"),
    (["cluster", "local", "up", "--servers", "abc"], "agglab cluster local up: argument --servers: invalid int"),
    (["clean", "--yes", "--nosuch"], "agglab: unrecognized arguments: --nosuch"),
    # values that used to start a run: not a number, not finite, out of range
    (["allreduce", "--bw", "nan"], "agglab allreduce: --bw must be a positive rate in Mb/s, got nan"),
    (["allreduce", "--bw", "inf"], "--bw must be a positive rate in Mb/s, got inf"),
    (["allreduce", "--give-up", "nan"], "--give-up must be positive seconds, got nan"),
    (["allreduce", "--seed", "-1"], "--seed must be within 0..4294967295, got -1"),
    (["allreduce", "--chaos", "99999999999999999999999"], "--chaos must be within 0..4294967295"),
    (["lab", "--k", "-2"], "agglab lab: --k must be a non-negative integer, got -2"),
    (["allreduce", "--topology", "fattree", "--k", "0"], "fat-tree k must be an even number >= 2, got 0"),
    (["allreduce", "--topology", "fattree", "--k", "1000"], "fat-tree k must be at most 64"),
    (["allreduce", "--topology", "bcube", "--tree", "bml", "--k", "30"], "BCube(3,30) has"),
    (["allreduce", "--keep", "{files}/notes.txt/run"], "cannot be made"),
    # root may write /proc by access(), but nothing can be made there: refused before the run
    (["allreduce", "--keep", "/proc/agglab-kept/run"], "--keep /proc/agglab-kept/run: cannot be made (/proc is not"),
    (["lab", "--script", "{files}/nope.txt"], "agglab lab: --script {files}/nope.txt: No such file or directory"),
    (["lab", "--script", "{files}/adir"], "agglab lab: --script {files}/adir: Is a directory"),
    (["train", "--lr", "nan"], "agglab train: --steps, --batch and --lr must be positive"),
    (["calibrate", "--start", "nan"], "agglab calibrate: need --workers >= 2"),
    (["calibrate", "--window", "-1"], "agglab calibrate: --window must be within 1..1024, got -1"),
    (["calibrate", "--seconds", "0"], "agglab calibrate: need --seconds > 0"),
    (["calibrate", "--refine", "-1"], "agglab calibrate: need --refine >= 0"),
    # files: unreadable, not text, not what they should be, not writable
    (["allreduce", "--topology", "{files}/broken.yaml"], "broken.yaml:7: YAML syntax"),
    (["allreduce", "--cluster", "{files}/binary.yaml"], "cluster file {files}/binary.yaml: not text (not UTF-8)"),
    (["cluster", "check", "{files}/binary.yaml"], "agglab cluster check: cluster file {files}/binary.yaml: not text"),
    (["cluster", "check", "{files}/list.yaml"], "server 1 is not a mapping"),
    (["draw", "fattree", "-o", "{files}/nodir/x.svg"], "agglab draw: -o {files}/nodir/x.svg: No such file or directory"),
    (["export", "p4app", "fattree", "--out", "{files}/notes.txt"], "agglab export p4app: --out {files}/notes.txt: File exists"),
    (["exercise", "start", "1", "--dir", "{files}/notes.txt"], "agglab exercise: {files}/notes.txt: Not a directory"),
    (["exercise", "grade", "9", "{files}/class"], "agglab exercise: no exercise 9;"),
    (["exercise", "grade", "1"], "agglab exercise: agglab exercise grade needs the folder of submissions"),
    (["exercise", "grade", "1", "{files}/nope"], "agglab exercise: {files}/nope is not a folder of submissions"),
    (["exercise", "grade", "1", "{files}/adir"], "agglab exercise: {files}/adir holds no student folders"),
    (["exercise", "grade", "1", "{files}/class", "--out", "{files}/adir"],
     "agglab exercise: cannot write {files}/adir: Is a directory"),
    (["exercise", "grade", "1", "{files}/class", "--out", "{files}/nodir/g.csv"],
     "agglab exercise: cannot write {files}/nodir/g.csv: No such file or directory"),
    (["exercise", "grade", "1", "{files}/class", "--timeout", "0"],
     "agglab exercise: --timeout must be a positive number of seconds, not 0"),
    (["exercise", "check", "1", "{files}/class"], "a folder of submissions is for `agglab exercise grade`"),
    (["vectors", "run", "{files}/nope.yaml"], "agglab vectors run: {files}/nope.yaml: No such file or directory"),
    (["vectors", "run", "{files}/broken.yaml"], "agglab vectors run: {files}/broken.yaml: not a YAML text file"),
    (["vectors", "run", "{files}/binary.yaml"], "agglab vectors run: {files}/binary.yaml: not a YAML text file"),
    (["vectors", "run", "{files}/adir"], "agglab vectors run: {files}/adir: Is a directory"),
    (["vectors", "run", "{files}/list.yaml"], "agglab vectors run: {files}/list.yaml: not a vector file"),
    # --web-port and --web-host: refused before the network, not after it is built
    (["allreduce", "--web-port", "70000"], "agglab allreduce: --web-port must be 0..65535, got 70000"),
    (["lab", "--web-port", "-1"], "agglab lab: --web-port must be 0..65535, got -1"),
    (["allreduce", "--web", "--web-host", "no-such-host.invalid"], "--web-host no-such-host.invalid: not an address"),
    (["allreduce", "--web", "--web-host", "192.0.2.7"], "--web-host 192.0.2.7: not an address of this machine"),
]


@pytest.mark.parametrize("argv,message", CASES, ids=[" ".join(a) for a, _ in CASES])
def test_each_bad_input_is_one_line_and_exit_2(argv, message, files, capsys):
    argv = [a.replace("{files}", str(files)) for a in argv]
    assert exit_code(argv) == 2
    out, err = capsys.readouterr()
    assert err.count("\n") == 1 and message.replace("{files}", str(files)) in err, err
    assert "Traceback" not in err + out


def test_a_web_port_in_use_is_one_line_before_the_network(capsys):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert exit_code(["allreduce", "--web", "--web-port", str(port)]) == 2
    err = capsys.readouterr().err
    assert err == f"agglab allreduce: --web-port {port}: already in use on 127.0.0.1 (give another, or 0 for a " \
                  "free one)\n"


def test_a_privileged_web_port_as_non_root_is_one_line(tmp_path):
    """As a user other than root (root becomes `nobody` with setpriv): ports below 1024 need
    root, and the check says so in one line."""
    import subprocess

    from agglab.web import check_listen

    if os.geteuid() != 0:
        with pytest.raises(ValueError, match=r"^--web-port 80: ports below 1024 need root"):
            check_listen("127.0.0.1", 80)
        return
    code = "from agglab.web import check_listen\ncheck_listen('127.0.0.1', 80)\n"
    res = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", sys.executable, "-c", code],
                         capture_output=True, text=True, timeout=60, cwd=tmp_path, env={"PYTHONPATH": str(REPO)})
    assert res.stderr.strip().splitlines()[-1] == ("ValueError: --web-port 80: ports below 1024 need root (give one "
                                                    "above 1023, or 0 for a free one)"), res.stderr


@pytest.mark.parametrize("argv,message", [
    (["{files}/broken.yaml", "--dry-run"], "broken.yaml: <file>: not valid YAML at line 7: expected ',' or ']'"),
    (["{files}/binary.yaml", "--dry-run"], "binary.yaml: <file>: not a text file (not UTF-8)"),
    (["quick", "--out", "{files}/notes.txt", "--dry-run"], "error: --out {files}/notes.txt:"),
    (["quick", "--name", "../../etc", "--dry-run"], "error: --name: '../../etc': a directory name under --out"),
    (["quick", "--repeats", "abc"], "agglab experiment: argument --repeats: invalid int value: 'abc'"),
])
def test_experiment_bad_input_is_one_line_and_exit_2(argv, message, files, capsys):
    """`agglab experiment` execs `python -m agglab.experiments`: its main, called here in-process."""
    from agglab.experiments.cli import main as experiment_main

    argv = [a.replace("{files}", str(files)) for a in argv]
    try:
        code = experiment_main(argv, log=sys.stderr)
    except SystemExit as exc:
        code = exc.code
    assert code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message.replace("{files}", str(files)) in err and "Traceback" not in err, err


# -- the live page's actions ------------------------------------------------------------------
@pytest.fixture
def page():
    from tests.test_web_server import FakeActions, FakeState
    from agglab.web import LOOPBACK
    from agglab.web.server import WebServer

    s = WebServer(FakeState(), FakeActions(), LOOPBACK, 0).start()
    yield s
    s.stop()


def _post_raw(page, data: bytes) -> tuple[int, dict]:
    req = urllib.request.Request(f"http://{page.host}:{page.port}/api/action?token={page.token}", data=data,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


@pytest.mark.parametrize("data,message", [
    (b"{not json", "expected a JSON object"),
    (b"\xff\xfe", "expected a JSON object"),
    (b"[1, 2]", "expected a JSON object"),
    (b'"fail"', "expected a JSON object"),
    (b"", "expected a JSON object"),
    (b'{"do": "nonsense"}', "unknown action 'nonsense'"),
    (b'{"do": "fail", "a": "x", "b": "y"}', "no link x-y"),
    (b'{"do": "allreduce", "elements": "many"}', "elements must be a whole number, got 'many'"),
    (b'{"do": "allreduce", "elements": Infinity}', "elements must be a whole number, got inf"),
    (b'{"do": "allreduce", "elements": [3]}', "elements must be a whole number, got [3]"),
])
def test_a_bad_action_is_a_400_with_one_line(page, data, message):
    status, body = _post_raw(page, data)
    assert status == 400 and body["ok"] is False and body["message"].startswith(message), (status, body)
    assert "\n" not in body["message"]


def test_an_action_that_fails_otherwise_is_a_500_with_one_line_not_a_traceback(page):
    def broken(name, up):
        raise RuntimeError("the switch's control socket closed\n  and a second line")

    page.actions.switch = broken
    status, body = _post_raw(page, b'{"do": "kill", "switch": "a1"}')
    assert (status, body) == (500, {"ok": False, "message": "kill failed: the switch's control socket closed"})


def test_cluster_and_vector_loaders_name_the_file(files):
    """The loaders themselves (not only the CLI around them) say what is wrong in one line."""
    from agglab.ground.cluster_file import ClusterFileError, load

    with pytest.raises(ClusterFileError, match=r"binary\.yaml: not text \(not UTF-8\)$"):
        load(files / "binary.yaml")
