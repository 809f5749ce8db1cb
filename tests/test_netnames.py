"""ground/netnames.py: agglab's namespace names in one place, and `agglab clean` removing the
ones whose maker is gone (a killed test's) while keeping a live one and anyone else's.

The root test makes a conformance namespace (agglab/testkit/netns.py, as a conformance module
does) from a child process that exits without deleting it, one from a child that stays alive,
one in the shape an older agglab named them (no pid: who made it is unknown) and one that is
not agglab's, then runs `agglab clean --all --yes` (in a scratch run root, and in a network
namespace of its own as tests/test_clean_all.py does: `--all` also deletes root interfaces).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from agglab.ground import netnames
from agglab.ground.netnames import CLUSTER, CONF, RUN, SCRATCH
from agglab.ground.rundir import secure_dir
from tests.test_layers import imported_names, product_files

REPO = Path(__file__).resolve().parent.parent
MAKES_NETNS = re.compile(r"""netns["']?\s*,?\s*["']?add\b""")


def test_every_module_that_makes_a_namespace_names_it_through_netnames():
    """The one place that knows agglab's prefixes is the one every maker uses: a module with
    an `ip netns add` that does not take its names from ground/netnames.py would make
    namespaces `agglab clean` cannot tell from anyone else's."""
    makers = [f for f in product_files() if MAKES_NETNS.search(f.read_text()) and f.name != "netnames.py"]
    rel = {str(f.relative_to(REPO)) for f in makers}
    assert {"ground/netns.py", "agglab/testkit/netns.py", "softswitch/scratchnet.py",
            "agglab/bench/limit_chain.py", "emulation/cluster/practice.py"} <= rel, rel
    for f in makers:
        assert "agglab.ground.netnames" in imported_names(f), f"{f.relative_to(REPO)} makes namespaces " \
                                                             "without ground/netnames.py"


def test_names_say_their_maker_and_nothing_else_is_ours():
    me = os.getpid()
    assert CONF.owner_of(CONF.new("0a1b2c3d")) == me
    assert netnames.owner_of(SCRATCH.new("ab12c-h3", owner=4242)) == 4242
    assert netnames.owner_of(SCRATCH.new("ab12c-mid", owner=7)) == 7
    assert netnames.owner_of("agglab-run-123-0a1b2c3d") == 123
    for legacy in ("agglab-conf-0a1b2c3d", "agglab-t-ab12c-h1"):     # an older agglab's: ours, maker unknown
        assert netnames.kind_of(legacy) is not None and netnames.owner_of(legacy) is None
    assert netnames.kind_of("agglab-c3") is CLUSTER and netnames.owner_of("agglab-c3") is None
    for foreign in ("agglab-c3x", "agglab-runner", "agglab-conf-", "mynet", "agglab-t-1-x", "agglab-run-12"):
        assert netnames.kind_of(foreign) is None, foreign
    with pytest.raises(ValueError, match="is not a name of"):
        RUN.new("not hex")


def test_survey_lists_only_agglabs(tmp_path):
    for n in ("agglab-conf-77-0a1b2c3d", "agglab-c1", "foreign", "agglab-t-ab12c-h1"):
        (tmp_path / n).touch()
    found = {f.name: f for f in netnames.survey(tmp_path)}
    assert set(found) == {"agglab-conf-77-0a1b2c3d", "agglab-c1", "agglab-t-ab12c-h1"}
    assert found["agglab-conf-77-0a1b2c3d"].owner == 77 and found["agglab-conf-77-0a1b2c3d"].kind is CONF
    assert found["agglab-c1"].owner is None and found["agglab-t-ab12c-h1"].owner is None


MAKE = """
import sys
from agglab.testkit.netns import Namespace
ns = Namespace(0)
ns.create()
print(ns.name, flush=True)
if sys.argv[1:] == ["STAY"]:
    sys.stdin.read()
"""


def _made_by_child(stay: bool) -> tuple[str, subprocess.Popen]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    p = subprocess.Popen([sys.executable, "-c", MAKE, *(["STAY"] if stay else [])], cwd=REPO, env=env,
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    name = p.stdout.readline().strip()
    assert CONF.owner_of(name) == p.pid, name
    if not stay:
        assert p.wait(timeout=60) == 0          # gone, its namespace left behind (as a kill -9 leaves it)
    return name, p


def _exists(name: str) -> bool:
    return (netnames.NETNS_DIR / name).exists()


@pytest.mark.root
def test_clean_all_removes_a_namespace_whose_maker_is_gone_and_keeps_the_rest(tmp_path):
    root = secure_dir(tmp_path / "runs")
    legacy = f"agglab-conf-{uuid.uuid4().hex[:8]}"
    foreign = f"notagglab-{uuid.uuid4().hex[:8]}"
    made = [legacy, foreign]
    live = None
    try:
        for n in made:
            subprocess.run(["ip", "netns", "add", n], check=True, timeout=30)
        gone, _ = _made_by_child(stay=False)
        made.append(gone)
        live_name, live = _made_by_child(stay=True)
        made.append(live_name)
        assert all(_exists(n) for n in made)
        env = {**os.environ, "AGGLAB_RUN_ROOT": str(root), "PYTHONPATH": str(REPO)}
        res = subprocess.run(["unshare", "-n", sys.executable, "-m", "agglab", "clean", "--all", "--yes"], cwd=REPO,
                             env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120)
        assert res.returncode == 0, res.stdout + res.stderr
        assert not _exists(gone), res.stdout
        assert f"  {gone} (a conformance test's BMv2 ports" in res.stdout          # listed before
        assert re.search(rf"removed \d+ namespace\(s\) whose maker is gone \([^)]*{gone}", res.stdout), res.stdout
        assert _exists(live_name) and live.poll() is None                        # its maker runs: kept
        assert _exists(foreign)                                                  # not agglab's: kept
        assert _exists(legacy) and f"{legacy}" in res.stdout.split("left alone", 1)[-1]   # maker unknown: said
    finally:
        if live is not None:
            live.stdin.close()
            live.wait(timeout=60)
        for n in made:
            subprocess.run(["ip", "netns", "del", n], capture_output=True, timeout=30)
