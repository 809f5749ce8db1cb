"""`agglab allreduce --keep DIR --pcap --progress --json`: the run can be read afterwards.

The kept directory holds the switch's log, every control call sent to it, the controller's
events, the workers' plan/logs/reports and the JSON result; the per-port pcaps decode with
tshark and the agglab dissector into aggregation headers whose fields match the run (job 0,
every block of every worker, results flagged); the progress bar went to stderr and stdout
stayed one JSON object.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from agglab.ground import wire
from tests.leftovers import leftovers, new_leftovers

REPO = Path(__file__).resolve().parent.parent
LUA = REPO / "tools" / "wireshark" / "agglab.lua"
pytestmark = [pytest.mark.root, pytest.mark.mininet, pytest.mark.net_timeout(150)]

WORKERS, ELEMENTS = 2, wire.K * 40      # 40 blocks per worker


def _agglab(*argv, root: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, AGGLAB_RUN_ROOT=str(root), PYTHONPATH=str(REPO))
    return subprocess.run([sys.executable, "-m", "agglab", *argv], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=120)


def _decode(pcap: Path) -> list[dict]:
    fields = ["agglab.job", "agglab.ver", "agglab.slot", "agglab.block", "agglab.worker", "agglab.flags.result",
              "agglab.value"]
    out = subprocess.run(["tshark", "-X", f"lua_script:{LUA}", "-r", str(pcap), "-Y", "agglab", "-T", "fields",
                          "-E", "separator=|", *sum((["-e", f] for f in fields), [])],
                         capture_output=True, text=True, timeout=120, check=True).stdout
    return [dict(zip(fields, line.split("|"))) for line in out.splitlines()]


@pytest.mark.skipif(shutil.which("tshark") is None, reason="needs Debian's tshark (scripts/install-system.sh)")
def test_kept_run_has_logs_commands_events_result_and_decodable_pcaps(tmp_path):
    keep = tmp_path / "kept"
    before = leftovers()
    proc = _agglab("allreduce", "--workers", str(WORKERS), "--elements", str(ELEMENTS), "--keep", str(keep),
                   "--pcap", "--progress", "--json", root=tmp_path / "runs")
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(proc.stdout)                  # stdout is the JSON object alone
    assert result["exact"] and result["kept"] == str(keep / "run1")
    # the bar: blocks done of the total (both workers' blocks) and a rate, on stderr
    total = WORKERS * ELEMENTS // wire.K
    assert re.search(rf"allreduce: 100%.*{total}/{total} .*blocks/s", proc.stderr), proc.stderr[-1000:]

    assert "starting s1" in (keep / "s1.log").read_text()
    commands = (keep / "s1.commands").read_text().splitlines()
    assert any(re.match(r"\+\d+\.\d+ table_add agg_job agg_child ", c) for c in commands), commands[:20]
    assert "trees_installed" in (keep / "events.log").read_text()
    kept_result = json.loads((keep / "run1" / "result.json").read_text())
    assert kept_result["exact"] and kept_result["packets"] == result["packets"]
    assert {p.name for p in (keep / "run1").glob("rank*.log")} == {f"rank{r}.log" for r in range(WORKERS)}
    assert not list(keep.glob("*.sock")) and not (keep / "owner.pid").exists()

    pcaps = sorted((keep / "pcaps").glob("*.pcap"))
    assert [p.name for p in pcaps] == ["s1-eth1_in.pcap", "s1-eth1_out.pcap", "s1-eth2_in.pcap", "s1-eth2_out.pcap"]
    sent = _decode(keep / "pcaps" / "s1-eth1_in.pcap")          # what worker 0 sent the switch
    back = _decode(keep / "pcaps" / "s1-eth1_out.pcap")         # what the switch sent back to it
    assert {r["agglab.job"] for r in sent + back} == {"0"}
    assert {r["agglab.worker"] for r in sent} == {"0"}
    assert all(r["agglab.flags.result"] in ("0", "False") for r in sent)
    assert all(r["agglab.flags.result"] in ("1", "True") for r in back)
    # 40 blocks, window 40, int32: slot 0's lead round (version 0, the consistency lanes) then
    # its data round (version 1); every other slot's one data round at once (version 0); each
    # data result, decoded by the dissector, is the block of the sum the worker accepted (its
    # rank0.npy)
    blocks = ELEMENTS // wire.K

    def is_data(r):
        return r["agglab.ver"] == ("1" if r["agglab.block"] == "0" else "0")

    data = {int(r["agglab.block"]): [int(v) for v in r["agglab.value"].split(",")] for r in back if is_data(r)}
    assert sorted(data) == list(range(blocks))
    assert {int(r["agglab.block"]) for r in sent if is_data(r)} == set(range(blocks))
    assert {(r["agglab.block"], r["agglab.ver"]) for r in sent if not is_data(r)} == {("0", "0")}   # the one lead
    accepted = np.load(keep / "run1" / "rank0.npy")
    for b, values in data.items():
        assert values == accepted[b * wire.K:(b + 1) * wire.K].tolist(), b
    assert not list((tmp_path / "runs").glob("*")), "the run directory stayed in the run root"
    left = new_leftovers(before)
    assert not any(left.values()), left



@pytest.mark.bmv2
@pytest.mark.skipif(shutil.which("tshark") is None, reason="needs Debian's tshark (scripts/install-system.sh)")
def test_bmv2_run_kept_with_pcaps(tmp_path):
    """`--pcap` on BMv2: simple_switch refuses a --pcap directory that does not exist, so the
    network makes it; its per-port pcaps decode into what worker 0 sent and got back. (In the
    default run root: a run root as long as pytest's makes BMv2's notification socket path too
    long, which the next test shows is refused in one line.)"""
    keep = tmp_path / "kept"
    env = {k: v for k, v in os.environ.items() if k != "AGGLAB_RUN_ROOT"}   # BMv2's socket paths must be short
    proc = subprocess.run([sys.executable, "-m", "agglab", "allreduce", "--backend", "bmv2", "--workers", str(WORKERS),
                           "--elements", str(ELEMENTS), "--keep", str(keep), "--pcap", "--json"], cwd=REPO,
                          env=dict(env, PYTHONPATH=str(REPO)), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(proc.stdout)["exact"]
    names = {p.name for p in (keep / "pcaps").glob("*.pcap")}
    assert {"s1-eth1_in.pcap", "s1-eth1_out.pcap", "s1-eth2_in.pcap", "s1-eth2_out.pcap"} <= names, names
    sent = _decode(keep / "pcaps" / "s1-eth1_in.pcap")
    back = _decode(keep / "pcaps" / "s1-eth1_out.pcap")
    assert sent and {r["agglab.worker"] for r in sent} == {"0"}
    assert {int(r["agglab.block"]) for r in back} == set(range(ELEMENTS // wire.K))   # every block's result came back
    assert all(r["agglab.flags.result"] in ("1", "True") for r in back)


@pytest.mark.bmv2
def test_bmv2_socket_path_too_long_is_one_line(tmp_path):
    """simple_switch aborts (SIGABRT, no message) on a notification socket path longer than a
    socket address; the network refuses such a run root first, saying what to do."""
    deep = tmp_path / ("d" * 60)
    proc = _agglab("allreduce", "--backend", "bmv2", "--workers", "2", "--elements", "640", root=deep)
    assert proc.returncode != 0
    assert "longer than a socket address allows (107 bytes): give AGGLAB_RUN_ROOT a shorter directory" in proc.stderr, \
        proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-2000:]
