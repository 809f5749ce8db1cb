"""A scheme is its own modules plus one row: ATP copied under a new name works.

In a scratch copy of the repository (as tests/test_tree_discovery.py makes one), `myatp` is
made the way a developer would: ATP's own files copied and renamed (softswitch/schemes,
hosts/schemes, controller/schemes, its P4 control), a row in ground/schemes.py with a flag
bit of its own, that flag in constants.p4, and agglab.p4's include, instance and branch.
Every layer then finds it by name (the twin's branch, the hosts' runner, the controller's
installer, the fuzzer's exceptions, the P4 check), and the root test runs it end to end on
the software switch in Mininet: the sum is exact and the switches' `myatp_stats` counted the
pool at work, which only the copied control can do (the checkout's pipeline would reject a
packet with the new flag, and its hosts have no runner for the name). The count of files
added or touched is printed; ATP itself took 21 (docs/guide/atp.md).
"""

from __future__ import annotations

import filecmp
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ground.paths import REPO
from tests.test_tree_discovery import PACKAGES

# ATP's own files, one per layer; everything else a new scheme needs is in ADDED_TO
OWN = ("p4src/include/atp.p4", "softswitch/schemes/atp.py", "hosts/schemes/atp.py", "controller/schemes/atp.py")
ADDED_TO = ("ground/schemes.py", "p4src/include/constants.p4", "p4src/agglab.p4")
ROW = '''    Scheme("myatp", in_network=True, p4=True, sparse=False, window=DEFAULT_WINDOW, shares_pool=True,
           flag="AGG_FLAG_MYATP", dtypes=("int32",), summary="a copy of atp"),
'''


def rename(text: str) -> str:
    """What a developer copying ATP renames: its names (tables, registers, counters, events,
    the row's key), its P4 control and classes, its flag and its P4 macros; the pool's size
    and the counters' indices stay ATP's constants, the hosts' window helper stays shared."""
    text = re.sub(r"\batp(?!_window)", "myatp", text)
    text = re.sub(r"\bAtp", "MyAtp", text)
    for old in ("AGG_FLAG_ATP", "AGGLAB_ATP_P4", "ATP_ADD_LANE"):
        text = text.replace(old, old.replace("ATP", "MYATP"))
    return text


def make_scheme(root: Path) -> None:
    for rel in OWN:
        (root / rel.replace("atp", "myatp")).write_text(rename((root / rel).read_text()))
    schemes = root / "ground/schemes.py"
    text = schemes.read_text()
    schemes.write_text(text.replace('    Scheme("ring",', ROW + '    Scheme("ring",', 1))
    constants = root / "p4src/include/constants.p4"
    text = constants.read_text()
    flag = re.search(r"^#define AGG_FLAG_ATP .*\n", text, re.M).group(0)
    constants.write_text(text.replace(flag, flag + "#define AGG_FLAG_MYATP   64          /* a copy of ATP */\n"))
    program = root / "p4src/agglab.p4"
    text = program.read_text()
    text = text.replace("    bit<1>  atp_absorbed;", "    bit<1>  atp_absorbed;\n    bit<1>  myatp_absorbed;")
    text = text.replace('#include "include/atp.p4"', '#include "include/atp.p4"\n#include "include/myatp.p4"')
    text = text.replace("    Atp() atp;\n", "    Atp() atp;\n    MyAtp() myatp;\n")
    start = text.index("} else if (hdr.agg.isValid() && (hdr.agg.flags & AGG_FLAG_ATP) != 0 && !hdr.data.isValid())")
    end = text.index("} else if (hdr.agg.isValid()) {")
    program.write_text(text[:end] + rename(text[start:end]) + text[end:])


def changed_files(root: Path) -> tuple[list[str], list[str]]:
    """(added, touched): the scratch copy's files against the checkout's."""
    added, touched = [], []
    for name in PACKAGES:
        for f in sorted((root / name).rglob("*")):
            if not f.is_file() or "__pycache__" in f.parts:
                continue
            rel = str(f.relative_to(root))
            if not (REPO / rel).is_file():
                added.append(rel)
            elif not filecmp.cmp(f, REPO / rel, shallow=False):
                touched.append(rel)
    return added, touched


@pytest.fixture(scope="module")
def scratch(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("repo")
    for name in PACKAGES:
        shutil.copytree(REPO / name, root / name, ignore=shutil.ignore_patterns("__pycache__", "build"))
    make_scheme(root)
    return root


PROBE = r"""
import json
from agglab.testkit.frames import build
from controller.installers import INSTALLERS
from emulation import wire_model
from ground import schemes
from ground.runspec import RunSpec
from hosts import fuzz
from hosts.communicator import RUNNERS
from softswitch.pipeline import Pipeline
from softswitch.schemes import BRANCHES, p4_gaps

# the twin, as the ATP vector atp_collision_fallback with the copy's names and flag: job 1's
# ranks 1 and 2 complete an aggregator; the sum leaves toward the PS (h3) by the IPv4 route
p = Pipeline()
for cmd in ("table_add ipv4_lpm ipv4_forward 10.0.0.3/32 => 02:00:00:00:00:03 3",
            "table_add myatp_job myatp_aggregate 1 => 6"):
    p.command(cmd)
sent = [(1, {"from": "h1", "ip": {"dst": "10.0.0.3"}, "agg": {"flags": 64, "job": 1, "worker": 1, "block": 5,
                                                              "next_block": 2}, "values": {"fill": 7}}),
        (2, {"from": "h2", "ip": {"dst": "10.0.0.3"}, "agg": {"flags": 64, "job": 1, "worker": 2, "block": 5,
                                                              "next_block": 4}, "values": {"fill": -3}})]
out = [p.process(port, build(spec)) for port, spec in sent]
# both pools' flags: ATP's control takes it (the first row, as agglab.p4's first branch); with
# no atp_job entry for job 1 there, it is only forwarded (ATP_STAT_PASS)
both = {"from": "h1", "ip": {"dst": "10.0.0.3"}, "agg": {"flags": 96, "job": 1, "worker": 1, "block": 9,
                                                         "next_block": 2}, "values": {"fill": 1}}
out.append(p.process(1, build(both)))
want = build({"from": "h2", "eth": {"dst": "02:00:00:00:00:03"}, "ip": {"dst": "10.0.0.3", "ttl": 63},
              "udp": {"checksum": 0}, "agg": {"flags": 64, "job": 1, "worker": 2, "block": 5, "next_block": 6},
              "values": {"fill": 4}})
try:
    wire_model.wire_seconds(RunSpec(algorithm="myatp", dtype="int32"))
    bound = None
except wire_model.BoundError as exc:
    bound = str(exc)
print(json.dumps({
    "scheme": schemes.SCHEMES["myatp"].flag_bits, "branch": list(BRANCHES["myatp"]),
    "runner": "myatp" in RUNNERS, "installer": INSTALLERS["myatp"].__module__,
    "fuzz": fuzz.OWN_TABLE_FLAGS, "gaps": p4_gaps(), "module": schemes.__file__,
    "stats": [int(c) for c in p.counters["myatp_stats"]], "atp_stats": [int(c) for c in p.counters["atp_stats"]],
    "out": [[port for port, _ in o] for o in out], "sum": out[1] == [(3, want)], "bound": bound,
}))
"""


def _python(root: Path, code: str, timeout: int, **env) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, timeout=timeout,
                          env={**env, "PYTHONPATH": str(root)})


def test_a_copied_scheme_is_its_own_files_plus_one_row(scratch: Path):
    added, touched = changed_files(scratch)
    print(f"\nmyatp, a copy of atp: {len(added) + len(touched)} files ({len(added)} added: {', '.join(added)}; "
          f"{len(touched)} touched: {', '.join(touched)})")
    assert sorted(added) == sorted(rel.replace("atp", "myatp") for rel in OWN)
    assert sorted(touched) == sorted(ADDED_TO)
    out = _python(scratch, PROBE, 120, PATH="/usr/bin:/bin")
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    assert got["module"].startswith(str(scratch))               # the scratch copy ran, not the checkout
    assert got["scheme"] == 64 and got["branch"] == [64, False]  # its own flag, its own table
    assert got["runner"] and got["installer"] == "controller.schemes.myatp"
    assert got["fuzz"] == 32 | 64 and got["gaps"] == []
    assert "--algorithm myatp has no wire model" in got["bound"]   # as ATP's: no bound, said loudly
    # the twin aggregated in the copied control: the first packet claimed the aggregator (and
    # was absorbed), the second added to it and completed it, and the sum left toward the PS
    assert got["out"][:2] == [[], [3]] and got["sum"]
    assert got["stats"][:3] == [1, 1, 1] and sum(got["stats"]) == 3
    # a packet with both flags went to ATP's control, which only forwarded it
    assert got["out"][2] == [3] and got["atp_stats"] == [0, 0, 0, 0, 0, 0, 1, 0]


E2E = r"""
import json
from emulation.session import run_spec
from ground.runspec import RunSpec

r = run_spec(RunSpec(algorithm="myatp", workers=4, elements=20_000, loss=0.02, seed=3))
print(json.dumps({"exact": r["exact"], "errors": r.get("errors"), "switch": r["switch"]}))
"""


@pytest.mark.root
@pytest.mark.mininet
@pytest.mark.slow
@pytest.mark.net_timeout(420)
def test_the_copied_scheme_runs_end_to_end_on_the_twin(scratch: Path):
    from tests.leftovers import assert_clean

    out = _python(scratch, E2E, 400, **{k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
    assert out.returncode == 0, out.stderr[-4000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["exact"], got["errors"]
    sw = got["switch"]
    assert sw["myatp_claim"] > 0 and sw["myatp_done"] > 0, sw      # the copied control aggregated
    assert "atp_claim" not in sw, sw
    assert_clean()
