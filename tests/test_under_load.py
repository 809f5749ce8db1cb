"""tools/under_load.py: the test suite beside busy loops, on a fresh clone, with its load and hangs.

The command it runs here is a small script of the test's own that reports what it saw (its
working directory, the busy loops running beside it) and plays a run that declared two
switches hung, one stopped on purpose and one live; the tool must run it in a clone of HEAD,
beside the loops, say both hangs (the live one by name), return the command's exit status,
and leave no loop and no clone behind.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from agglab.ground.paths import REPO

_spec = importlib.util.spec_from_file_location("under_load", REPO / "tools" / "under_load.py")
under_load = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(under_load)

CHILD = r"""
import json, os, sys
from pathlib import Path
spin = []
for pid in os.listdir("/proc"):
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[:-1]
    except OSError:
        continue
    if [a.decode() for a in argv] == ["sh", "-c", "while :; do :; done"]:
        spin.append(int(pid))
Path(os.environ["AGGLAB_FAILURE_LOG"]).write_text("=== tests/test_x.py::test_y (call) failed at 10:00:00\nE  assert 1 == 2\n")
audit = Path(os.environ["AGGLAB_HANG_AUDIT"])
with audit.open("a") as f:
    f.write(json.dumps({"switch": "a1", "state": "stopped", "run": "/run/agglab/net-x"}) + "\n")
    f.write(json.dumps({"switch": "e6", "state": "sleeping", "run": "/run/agglab/net-y"}) + "\n")
# every directory down to the clone lets any user in (a test runs a child as nobody)
others = all(p.stat().st_mode & 0o005 == 0o005 for p in [Path.cwd(), *Path.cwd().parents])
Path(sys.argv[1]).write_text(json.dumps({"cwd": os.getcwd(), "spin": spin, "others": others,
                                         "git": Path(".git").is_dir(), "ci": os.environ.get("CI")}))
print("the child ran")
print("======= 2250 passed, 6 skipped, 2 warnings in 2974.46s (0:49:34) =======")
print("12 passed, 10 deselected in 167.48s")
sys.exit(3)
"""


def _spinning() -> set[int]:
    found = set()
    for pid in os.listdir("/proc"):
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[:-1]
        except OSError:
            continue
        if [a.decode() for a in argv] == under_load.SPIN:
            found.add(int(pid))
    return found


def test_a_command_runs_in_a_clone_beside_the_loops_and_its_hangs_are_said(tmp_path, capsys):
    before = _spinning()
    seen, out = tmp_path / "seen.json", tmp_path / "out"
    rc = under_load.main(["--loops", "2", "--interval", "0.05", "--out", str(out), "--",
                          sys.executable, "-c", CHILD, str(seen)])
    assert rc == 3                                             # the command's own exit status
    child = json.loads(seen.read_text())
    assert len(set(child["spin"]) - before) == 2               # two loops ran beside it
    assert child["git"] and Path(child["cwd"]).resolve() != REPO.resolve()    # in a clone of its own ...
    assert child["others"]                                     # ... that another user can read, as CI's
    assert not Path(child["cwd"]).exists()                     # ... removed afterwards
    assert child["ci"] == os.environ.get("CI")                 # a given command keeps the caller's CI
    assert not _spinning() - before                            # no loop left running
    summary = json.loads((out / "summary.json").read_text())
    head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True,
                          text=True, check=True).stdout.strip()
    assert summary["commit"] == head and summary["loops"] == 2 and summary["returncode"] == 3
    assert summary["hangs"]["declared"] == 2 and summary["hangs"]["states"] == {"stopped": 1, "sleeping": 1}
    assert [r["switch"] for r in summary["hangs"]["not_stopped"]] == ["e6"]
    assert summary["failed"] == ["tests/test_x.py::test_y (call)"]
    assert len(summary["samples"]) >= 2 and summary["load_1min"]["min"] <= summary["load_1min"]["max"]
    assert "the child ran" in (out / "command.log").read_text()
    printed = capsys.readouterr().out
    assert "exit 3 after" in printed and "beside 2 busy loop(s)" in printed
    assert "not stopped on purpose: 1" in printed and "e6 was sleeping (run /run/agglab/net-y)" in printed
    assert "tests failed: 1" in printed and "  tests/test_x.py::test_y (call)" in printed
    assert summary["sessions"] == ["2250 passed, 6 skipped, 2 warnings in 2974.46s (0:49:34)",
                                   "12 passed, 10 deselected in 167.48s"]       # skips said, though none failed
    assert "pytest: 2250 passed, 6 skipped, 2 warnings in 2974.46s (0:49:34)" in printed


@pytest.mark.parametrize("argv,words", [
    (["--loops", "-1"], "--loops must be >= 0"),
    (["--interval", "0"], "--interval > 0"),
    (["--loops", "two"], "invalid int value: 'two'"),
])
def test_bad_options_are_one_line_and_exit_2(argv, words, capsys):
    with pytest.raises(SystemExit, match="^2$"):
        under_load.main(argv)
    err = capsys.readouterr().err.strip().splitlines()
    assert words in err[-1] and "Traceback" not in "\n".join(err)


def test_a_sigterm_ends_the_command_and_the_loops(tmp_path):
    """Killing the tool (SIGTERM, as `kill` or a CI's timeout does) ends its command's whole
    process group and its loops, and removes the clone: nothing keeps spinning on the machine."""
    from agglab.testkit.waits import wait_until

    before = _spinning()
    ready = tmp_path / "ready"
    script = f"echo $$ $PWD > {ready}.tmp && mv {ready}.tmp {ready} && exec sleep 600"
    tool = subprocess.Popen([sys.executable, str(REPO / "tools" / "under_load.py"), "--loops", "1",
                             "--out", str(tmp_path / "out"), "--", "sh", "-c", script],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_until(ready.exists, 120, "the command to start in its clone")
        pid, cwd = ready.read_text().split()
        assert len(_spinning() - before) == 1
        tool.terminate()
        out, err = tool.communicate(timeout=120)
    finally:
        if tool.poll() is None:
            tool.kill()
            tool.wait()
    assert tool.returncode == 128 + 15, err
    assert json.loads((tmp_path / "out" / "summary.json").read_text())["returncode"] == 128 + 15   # still said
    assert not Path(f"/proc/{pid}").exists()                   # the command's process is gone ...
    assert not _spinning() - before                            # ... and the loop
    assert not Path(cwd).exists()                              # the clone removed


@pytest.mark.parametrize("appeared", [False, True])
def test_a_stopped_command_s_practice_cluster_is_taken_down_too(tmp_path, appeared):
    """After a stop, the clone's `agglab clean`, and `agglab cluster local down` only when a
    practice cluster came up during the command (one that was up before is someone's own):
    a `make test-busy` stopped mid-way through a cluster test left its servers and their BMv2 switches
    up, and the next pass skipped the cluster tests. A stand-in for the clone's python records
    what it was asked to run."""
    clone, record = tmp_path / "clone", tmp_path / "argv"
    (clone / ".venv" / "bin").mkdir(parents=True)
    python = clone / ".venv" / "bin" / "python"
    python.write_text(f"#!/bin/sh\necho \"$*\" >> {record}\n")
    python.chmod(0o755)
    under_load.clean(clone, cluster_appeared=appeared)
    assert record.read_text().splitlines() == ["-m agglab clean"] + (["-m agglab cluster local down"] if appeared else [])
