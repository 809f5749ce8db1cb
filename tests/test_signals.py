"""SIGINT, SIGTERM and SIGHUP at set-up, mid-run and during a reroute stop `agglab allreduce`,
`agglab lab --script`, `agglab experiment` and `agglab train` cleanly: one line saying what was
interrupted, exit 128+signal, no namespace, interface, process or run directory left."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from agglab.testkit.waits import wait_until
from tests.leftovers import leftovers, new_leftovers

REPO = Path(__file__).resolve().parent.parent
EXAMPLE_DC = REPO / "experiments" / "topologies" / "example.yaml"    # 3 racks under 2 spines, 6 hosts
pytestmark = [pytest.mark.root, pytest.mark.mininet, pytest.mark.net_timeout(180)]


def _run_dirs(root: Path) -> list[Path]:
    return [d for d in root.glob("*") if d.is_dir()]


def _progress_started(root: Path) -> bool:
    for f in root.glob("*/*/rank*.progress"):
        try:
            if int(f.read_text().split()[0]) > 0:
                return True
        except (OSError, ValueError, IndexError):
            pass
    return False


def _rerouting(root: Path) -> bool:
    """The controller is rerouting or has rerouted (its epoch file, which the agents watch)."""
    for f in root.glob("*/epoch.json"):
        try:
            data = json.loads(f.read_text())
        except (OSError, ValueError):
            continue
        if data.get("status") == "rerouting" or data.get("epoch", 0) >= 1:
            return True
    return False


REACHED = {"set-up": lambda root, err: bool(_run_dirs(root)),
           "mid-run": lambda root, err: _progress_started(root),
           "reroute": lambda root, err: "link_down" in err or " went down" in err or _rerouting(root)}

FATTREE_FAIL = ["--topology", "fattree", "--k", "4", "--workers", "8", "--tree", "spt"]


def _allreduce(moment: str, tmp_path: Path) -> list[str]:
    extra = FATTREE_FAIL + ["--fail", "tree@0.3"] if moment == "reroute" else ["--workers", "4"]
    return ["allreduce", "--elements", "3000000", "--bw", "20", "--seed", "1", *extra]


def _lab(moment: str, tmp_path: Path) -> list[str]:
    """The lab on a YAML data centre (three racks, two spines), driven by a script."""
    script = tmp_path / "lab.txt"
    fail = " --fail tree@0.3" if moment == "reroute" else ""
    script.write_text(f"trees\nallreduce 3000000{fail}\nwait\nstats\n")
    return ["lab", "--topology", str(EXAMPLE_DC), "--workers", "6", "--tree", "spt", "--script", str(script)]


def _experiment(moment: str, tmp_path: Path) -> list[str]:
    run = {"topology": "single"} if moment != "reroute" else \
        {"topology": "fattree", "k": 4, "tree": "spt", "fail": ["tree@0.3"]}
    definition = tmp_path / "sig.yaml"
    definition.write_text(json.dumps({"name": "sig", "network": {"link": "100Gbps", "gradient": "100MB"},
                                      "emulated": {"gradient": "8MiB"}, "run": run, "repeats": 1,
                                      "series": {"in-network": {"algorithm": "switchml"}},
                                      "sweep": {"workers": [4 if moment != "reroute" else 8]}}))
    return ["experiment", str(definition), "--out", str(tmp_path / "results")]


def _train(moment: str, tmp_path: Path) -> list[str]:
    extra = FATTREE_FAIL[:-2] + ["--fail", "tree@0.3"] if moment == "reroute" else ["--workers", "2"]
    return ["train", "--model", "mlp", "--steps", "3000", "--bw", "20", "--out", str(tmp_path / "train"), *extra]


COMMANDS = {"allreduce": _allreduce, "lab": _lab, "experiment": _experiment, "train": _train}


@pytest.mark.parametrize("command,moment,signum", [
    ("allreduce", "set-up", signal.SIGTERM), ("allreduce", "mid-run", signal.SIGHUP),
    ("allreduce", "reroute", signal.SIGINT), ("allreduce", "mid-run", signal.SIGTERM),
    ("lab", "set-up", signal.SIGHUP), ("lab", "mid-run", signal.SIGTERM), ("lab", "reroute", signal.SIGINT),
    ("experiment", "set-up", signal.SIGTERM), ("experiment", "mid-run", signal.SIGINT),
    ("experiment", "reroute", signal.SIGHUP),
    ("train", "mid-run", signal.SIGTERM),
])
def test_signal_stops_the_command_cleanly(command, moment, signum, tmp_path):
    root = tmp_path / "runs"
    env = dict(os.environ, AGGLAB_RUN_ROOT=str(root), PYTHONPATH=str(REPO))
    argv = [sys.executable, "-m", "agglab", *COMMANDS[command](moment, tmp_path)]
    before = leftovers()
    proc = subprocess.Popen(argv, cwd=REPO, env=env, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    err: list[str] = []
    out: list[str] = []
    readers = [threading.Thread(target=lambda: err.extend(proc.stderr), daemon=True),
               threading.Thread(target=lambda: out.extend(proc.stdout), daemon=True)]
    for r in readers:
        r.start()
    def reached():
        assert proc.poll() is None, f"finished before the {moment} moment: {''.join(err)[-2000:]}"
        return REACHED[moment](root, "".join(err))

    wait_until(reached, 120, lambda: f"the {moment} moment: {''.join(err)[-2000:]}")
    proc.send_signal(signum)
    code = proc.wait(timeout=90)
    for r in readers:
        r.join(5)
    stderr = "".join(err)
    assert code == 128 + signum, stderr[-2000:]
    name = signal.Signals(signum).name
    last = stderr.strip().splitlines()[-1]
    assert last.startswith(f"agglab {command}: interrupted by {name}; everything it started was stopped "
                           "and removed"), stderr[-2000:]
    assert sum(f"interrupted by {name}" in line for line in stderr.splitlines()) == 1, stderr[-2000:]
    assert "Traceback" not in stderr + "".join(out), (stderr + "".join(out))[-3000:]
    assert _run_dirs(root) == [], "run directory left behind"
    left = new_leftovers(before)
    assert not any(left.values()), left
