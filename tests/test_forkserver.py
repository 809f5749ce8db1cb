"""ground/forkserver.py: a program forked from one imported process runs where a Popen of it
would (another process's network namespace, its own session, environment, working
directory, descriptors at the numbers given) and reports its own exit code."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from agglab.testkit.waits import wait_until
from agglab.ground.forkserver import Launcher
from tests.conftest import REPO

pytestmark = pytest.mark.root


def test_a_forked_program_runs_in_the_namespace_and_with_the_descriptors_given(tmp_path):
    holder = subprocess.Popen(["unshare", "--net", "sleep", "60"])       # a namespace to enter
    launcher = Launcher(tmp_path / "server.out", ("json",), cwd=REPO, env=dict(os.environ, PYTHONPATH=str(REPO)))
    read, write = os.pipe()
    try:
        target = holder.pid
        wait_until(lambda: os.stat(f"/proc/{target}/ns/net").st_ino != os.stat("/proc/self/ns/net").st_ino,
                   60, "unshare to make the namespace and exec")
        env = dict(os.environ, PYTHONPATH=str(REPO), CHILD_FD="77", CHILD_TAG="tagged")
        proc = launcher.spawn("tests.forkserver_child", ["3", "x"], tmp_path / "child.out", name="child",
                              env=env, cwd=tmp_path, netns=target, pass_fds={write: 77})
        os.close(write)
        seen = json.loads(os.read(read, 4096))
        assert proc.wait(timeout=20) == 3
        assert seen == {"net": os.stat(f"/proc/{target}/ns/net").st_ino, "cwd": str(tmp_path),
                        "argv": ["3", "x"], "sid": True, "env": "tagged"}
        assert seen["net"] != os.stat("/proc/self/ns/net").st_ino
        assert (tmp_path / "child.out").read_text() == "child says hello\n"
        assert os.read(read, 1) == b""        # the server kept no copy of the pipe's write end
    finally:
        os.close(read)
        launcher.close()
        holder.kill()
        holder.wait()
    assert launcher.proc.returncode == 0
