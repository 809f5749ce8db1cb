"""Two networks of the same topology at once, each in its own namespace (ground/netns.py).

Two `agglab lab` processes on a k=4 fat-tree with the same node names run an allreduce each
while each loses a different link: both are exact, and each one's events name only its own
failure; on BMv2 each has its own Thrift port 9090. Then one is killed with SIGKILL mid-allreduce: `agglab clean`, run while the
other still works, removes the dead one's namespace, processes and run directory and nothing
of the live one, which finishes exact.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from agglab.ground import netns
from agglab.ground.rundir import RunRecord, alive, secure_dir
from agglab.testkit.waits import wait_until

REPO = Path(__file__).resolve().parent.parent
LAB = ["--topology", "fattree", "--k", "4", "--workers", "8", "--tree", "spt", "--bw", "20"]

pytestmark = [pytest.mark.root, pytest.mark.mininet, pytest.mark.net_timeout(420)]


STARTED: list["Lab"] = []


@pytest.fixture(autouse=True)
def _labs_end():
    """A failed test's labs are stopped (SIGTERM: their own clean-up runs) before the
    leftovers check."""
    yield
    while STARTED:
        lab = STARTED.pop()
        if lab.proc.poll() is None:
            lab.proc.terminate()
            lab.proc.wait(timeout=120)


class Lab:
    """`agglab lab --script` in a child process, its output collected line by line."""

    def __init__(self, script: Path, root: Path | None, options: list[str] = LAB):
        env = {**{k: v for k, v in os.environ.items() if k != "AGGLAB_NET_WAIT"}, "PYTHONPATH": str(REPO),
               **({"AGGLAB_RUN_ROOT": str(root)} if root else {})}
        self.proc = subprocess.Popen([sys.executable, "-m", "agglab", "lab", *options, "--script", str(script)],
                                     cwd=REPO, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True)
        self.lines: list[str] = []
        self.reader = threading.Thread(target=lambda: self.lines.extend(self.proc.stdout), daemon=True)
        self.reader.start()
        STARTED.append(self)

    def text(self) -> str:
        return "".join(self.lines)

    def saw(self, what: str) -> bool:
        assert self.proc.poll() is None or what in self.text(), f"the lab ended early:\n{self.text()[-3000:]}"
        return what in self.text()

    def finish(self) -> str:
        code = self.proc.wait(timeout=300)
        self.reader.join(10)
        assert code == 0, self.text()[-3000:]
        return self.text()

    def namespace(self) -> str:
        found = [n for n in netns.names() if netns.owner_of(n) == self.proc.pid]
        assert len(found) == 1, (found, netns.names())
        return found[0]


def _script(tmp_path: Path, name: str, lines: list[str]) -> Path:
    path = tmp_path / f"{name}.txt"
    path.write_text("\n".join(lines) + "\n")
    return path


def _their_run(root: Path, pid: int) -> RunRecord:
    for path in root.iterdir():
        if (path / "owner.pid").read_text().strip() == str(pid):
            return RunRecord(path)
    raise AssertionError(f"no run directory of pid {pid} in {root}")


def _shells(run: RunRecord) -> list[int]:
    """The pids of a run's Mininet node shells (they live as long as its network)."""
    return [int(line.split()[0]) for line in (run.path / "pids").read_text().splitlines()
            if line.endswith(" shell")]


def _links_down(text: str) -> set[frozenset[str]]:
    """The links a lab's events say went down ("link c1-a5 went down ..."), as unordered pairs."""
    return {frozenset(m.group(1, 2)) for m in re.finditer(r"link (\w+)-(\w+) went down", text)}


def test_two_labs_of_one_topology_at_once_each_exact_each_failing_its_own_link(tmp_path):
    """Lab A loses the tree link `tree@0.3` picks, lab B loses a3-c1 (a link of the same
    shortest-path tree, which `tree@` does not pick first) half-way: both reroute and are exact,
    and each one's events name only its own link: neither failure reached the other network."""
    root = secure_dir(tmp_path / "runs")
    first = Lab(_script(tmp_path, "a", ["allreduce 2000000 --fail tree@0.3", "wait", "events"]), root)
    second = Lab(_script(tmp_path, "b", ["allreduce 2000000 --fail a3-c1@0.5", "wait", "events"]), root)
    both = (first, second)
    wait_until(lambda: all(lab.saw("allreduce started in the background") for lab in both), 240,
               lambda: "both allreduces: " + " || ".join(lab.text()[-1500:] for lab in both))
    spaces = {lab.namespace() for lab in both}
    assert len(spaces) == 2                                      # each in a namespace of its own ...
    root_links = {p.name for p in Path("/sys/class/net").iterdir()}
    assert not {"a1-eth1", "c1-eth1", "e1-eth1", "h1-eth0"} & root_links  # ... and none of it in the root one
    a, b = first.finish(), second.finish()
    for out in (a, b):
        assert "allreduce: exact" in out and "rerouted around link" in out, out[-3000:]
    down_a, down_b = _links_down(a), _links_down(b)
    assert down_b == {frozenset({"a3", "c1"})}, b[-3000:]
    assert len(down_a) == 1 and not down_a & down_b, (down_a, a[-3000:])   # one's failure never reached the other
    assert not spaces & set(netns.names())                       # each took its namespace with it


def test_a_killed_lab_is_cleaned_while_the_other_finishes_exact(tmp_path):
    root = secure_dir(tmp_path / "runs")
    doomed = Lab(_script(tmp_path, "a", ["allreduce 4000000", "wait"]), root)
    live = Lab(_script(tmp_path, "b", ["allreduce 2000000", "wait", "events"]), root)
    both = (doomed, live)
    wait_until(lambda: all(lab.saw("allreduce started in the background") for lab in both), 240,
               lambda: "both allreduces: " + " || ".join(lab.text()[-1500:] for lab in both))
    dead_space, live_space = doomed.namespace(), live.namespace()
    dead_run, live_run = _their_run(root, doomed.proc.pid), _their_run(root, live.proc.pid)
    dead_pids = [p for p in dead_run.pids() + netns.pids_in(dead_space) if alive(p)]
    live_shells = _shells(live_run)
    assert dead_pids and live_shells and all(alive(p) for p in live_shells)
    doomed.proc.send_signal(signal.SIGKILL)
    doomed.proc.wait(timeout=60)
    assert dead_space in netns.names() and dead_run.path.is_dir()    # a kill -9 leaves them ...
    env = {**os.environ, "PYTHONPATH": str(REPO), "AGGLAB_RUN_ROOT": str(root)}
    res = subprocess.run([sys.executable, "-m", "agglab", "clean"], cwd=REPO, env=env, capture_output=True,
                         text=True, timeout=120)
    assert res.returncode == 0 and "1 live run(s) left alone" in res.stdout, res.stdout + res.stderr
    assert dead_space not in netns.names() and not dead_run.path.exists()   # ... which clean removes
    assert not [p for p in dead_pids if alive(p)]
    assert live_space in netns.names() and live_run.path.is_dir()           # and nothing of the live one
    assert all(alive(p) for p in live_shells)                               # its nodes still run
    out = live.finish()
    assert "allreduce: exact" in out and "went down" not in out, out[-3000:]
    assert live_space not in netns.names()


@pytest.mark.bmv2
def test_two_bmv2_labs_at_once_each_with_its_own_thrift_ports(tmp_path):
    """Both networks' first switch listens on Thrift port 9090, each on its own loopback (in the
    default run root: BMv2's notification socket path must fit a socket address)."""
    root = None
    options = ["--backend", "bmv2", "--topology", "leafspine", "--workers", "4"]
    labs = [Lab(_script(tmp_path, name, ["allreduce 200000" + fail, "wait", "events"]), root, options)
            for name, fail in (("a", " --fail tree@0.3"), ("b", ""))]
    wait_until(lambda: all(lab.saw("allreduce started in the background") for lab in labs), 300,
               lambda: "both allreduces: " + " || ".join(lab.text()[-1500:] for lab in labs))
    for lab in labs:
        listening = subprocess.run(["ip", "netns", "exec", lab.namespace(), "ss", "-Hltn", "sport = :9090"],
                                   capture_output=True, text=True, check=True).stdout
        assert "127.0.0.1:9090" in listening or "*:9090" in listening or "0.0.0.0:9090" in listening, listening
    a, b = (lab.finish() for lab in labs)
    assert "allreduce: exact" in a and "went down" in a, a[-3000:]
    assert "allreduce: exact" in b and "went down" not in b, b[-3000:]
