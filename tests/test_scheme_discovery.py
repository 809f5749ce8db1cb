"""A scheme is its own modules plus one row: ATP copied under a new name works.

In a scratch copy of the repository (as tests/test_tree_discovery.py makes one), `myatp` is
made the way a developer would: ATP's own files copied and renamed (softswitch/schemes,
hosts/schemes, controller/schemes, its P4 control with its own flag and counters, the flag
given a bit of its own) and a row in ground/schemes.py. No shared file is touched: agglab.p4's
include, instance and branch are generated from the rows (include/schemes.p4, built before
every p4c run, not committed), and a scheme's defines are read from its own .p4. Every layer
then finds it by name (the twin's branch, the hosts' runner, the controller's installer, the
fuzzer's exceptions, the generated P4 lines), the BMv2 test compiles the copy's program with
p4c, and the root test runs it end to end on the software switch in Mininet: the sum is exact
and the switches' `myatp_stats` counted the pool at work, which only the copied control can do
(the checkout's pipeline would reject a packet with the new flag, and its hosts have no runner
for the name). The count of files added or touched is printed: the scheme's four own files
plus its row; ATP itself took 21 (docs/guide/atp.md).
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

from agglab.ground.paths import REPO
from tests.test_tree_discovery import PACKAGES

# ATP's own files, one per layer; the one shared file a new scheme touches is its row's
OWN = ("p4src/include/atp.p4", "softswitch/schemes/atp.py", "hosts/schemes/atp.py", "controller/schemes/atp.py")
ADDED_TO = ("ground/schemes.py",)
GENERATED = "p4src/include/schemes.p4"   # built from the rows before every p4c run, not committed
ROW = '''    Scheme("myatp", in_network=True, p4=True, sparse=False, window=DEFAULT_WINDOW, shares_pool=True,
           flag="AGG_FLAG_MYATP", dtypes=("int32",), summary="a copy of atp"),
'''


def rename(text: str) -> str:
    """What a developer copying ATP renames: its names (tables, registers, counters, events,
    the row's key), its P4 control and classes, its flag and its P4 macros; the pool's size
    and the counters' indices stay ATP's constants; the hosts' window helper, the pool's
    numbering (ground/atp_pool.py) and the run's pool-size option (`atp_pool_slots`) stay shared."""
    text = re.sub(r"\batp(?!_window|_pool)", "myatp", text)
    text = re.sub(r"\bAtp", "MyAtp", text)
    for old in ("AGG_FLAG_ATP", "AGGLAB_ATP_P4", "ATP_ADD_LANE"):
        text = text.replace(old, old.replace("ATP", "MYATP"))
    return text


def make_scheme(root: Path) -> None:
    for rel in OWN:
        (root / rel.replace("atp", "myatp")).write_text(rename((root / rel).read_text()))
    own_p4 = root / "p4src/include/myatp.p4"     # its flag: a bit of its own (ATP has 32)
    text = own_p4.read_text()
    own_p4.write_text(re.sub(r"^(#define AGG_FLAG_MYATP\s+)32\b", r"\g<1>64", text, count=1, flags=re.M))
    schemes = root / "ground/schemes.py"
    text = schemes.read_text()
    schemes.write_text(text.replace('    Scheme("ring",', ROW + '    Scheme("ring",', 1))


def changed_files(root: Path) -> tuple[list[str], list[str]]:
    """(added, touched): the scratch copy's files against the checkout's."""
    added, touched = [], []
    for name in PACKAGES:
        for f in sorted((root / name).rglob("*")):
            rel = str(f.relative_to(root))
            if not f.is_file() or "__pycache__" in f.parts or rel == GENERATED:
                continue
            if not (REPO / rel).is_file():
                added.append(rel)
            elif not filecmp.cmp(f, REPO / rel, shallow=False):
                touched.append(rel)
    return added, touched


@pytest.fixture(scope="module")
def scratch(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("repo")
    for name in PACKAGES:
        shutil.copytree(REPO / name, root / name, ignore=shutil.ignore_patterns("__pycache__", "build", "schemes.p4"))
    make_scheme(root)
    return root


PROBE = r"""
import json
from agglab.testkit.frames import build
from agglab.controller.installers import INSTALLERS
from agglab.emulation import wire_model
from agglab.ground import schemes
from agglab.ground.runspec import RunSpec
from agglab.hosts import fuzz
from agglab.hosts.communicator import RUNNERS
from agglab.softswitch.pipeline import Pipeline
from agglab.softswitch.schemes import BRANCHES, p4_gaps, render_p4, write_p4

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
    "p4": render_p4(), "written": str(write_p4()),
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
    assert touched == ["ground/schemes.py"]                      # its own files plus one row
    assert len(added) + len(touched) == len(OWN) + 1
    out = _python(scratch, PROBE, 120, PATH="/usr/bin:/bin")
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    assert got["module"].startswith(str(scratch))               # the scratch copy ran, not the checkout
    assert got["scheme"] == 64 and got["branch"] == [64, False]  # its own flag, its own table
    assert got["runner"] and got["installer"] == "agglab.controller.schemes.myatp"
    assert got["fuzz"] == 32 | 64 and got["gaps"] == []
    assert "--algorithm myatp has no wire model" in got["bound"]   # as ATP's: no bound, said loudly
    # the P4 lines generated from the rows: its include and instance, its branch after ATP's
    p4 = got["p4"]
    assert '#include "myatp.p4"' in p4 and "MyAtp() myatp;" in p4 and "myatp.apply(hdr, meta, standard_metadata);" in p4
    assert p4.index("AGG_FLAG_ATP") < p4.index("AGG_FLAG_MYATP") < p4.index("#define AGGLAB_ROLE_BRANCHES")
    assert got["written"] == str(scratch / GENERATED) and (scratch / GENERATED).read_text() == p4
    # the twin aggregated in the copied control: the first packet claimed the aggregator (and
    # was absorbed), the second added to it and completed it, and the sum left toward the PS
    assert got["out"][:2] == [[], [3]] and got["sum"]
    assert got["stats"][:3] == [1, 1, 1] and sum(got["stats"]) == 3
    # a packet with both flags went to ATP's control, which only forwarded it
    assert got["out"][2] == [3] and got["atp_stats"] == [0, 0, 0, 0, 0, 0, 1, 0]


COMPILE = r"""
import json, sys
from pathlib import Path
from agglab.emulation.p4build import compile_p4

j = json.loads(compile_p4(Path(sys.argv[1])).read_text())
print(json.dumps({"tables": [t["name"] for pl in j["pipelines"] for t in pl["tables"]],
                  "registers": {r["name"]: r["bitwidth"] for r in j["register_arrays"]},
                  "counters": {c["name"]: c["size"] for c in j["counter_arrays"]}}))
"""


@pytest.mark.bmv2
def test_the_copied_schemes_p4_compiles_with_p4c(scratch: Path, tmp_path: Path):
    """p4c on the scratch copy's agglab.p4, its schemes.p4 generated first (as every build does):
    the copied control is in the program beside ATP's, with its own table, registers and counter."""
    out = subprocess.run([sys.executable, "-c", COMPILE, str(tmp_path)], cwd=scratch, capture_output=True, text=True,
                         timeout=900, env={**os.environ, "PYTHONPATH": str(scratch)})
    assert out.returncode == 0, out.stderr[-4000:]
    got = json.loads(out.stdout)
    assert {"myatp_job", "atp_job", "agg_job"} <= set(got["tables"])
    assert got["registers"]["myatp_owner_job"] == got["registers"]["atp_owner_job"] == 8
    assert got["counters"]["myatp_stats"] == got["counters"]["atp_stats"] == 8


E2E = r"""
import json
from agglab.emulation.session import run_spec
from agglab.ground.runspec import RunSpec

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
