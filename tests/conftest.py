"""Shared pytest set-up: environment markers skip with a reason when the thing is absent.

- root:    needs root (namespaces, raw sockets)
- mininet: needs Debian's Mininet (python package + mnexec)
- bmv2:    needs BMv2 simple_switch and p4c (on PATH or under /opt/*/bin)
- cluster: builds a practice cluster (root, openssh-server's sshd, util-linux's unshare)
- browser: needs Debian's chromium and chromium-driver, and selenium (the test extras)
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import shutil
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

# Hypothesis' default 200 ms deadline per example is a wall-clock assertion: on a loaded 2-core
# machine a slow example fails as "flaky". Every property test runs without one (a hung example
# is the net_timeout guard's); tests/test_hygiene.py checks none sets it back.
with contextlib.suppress(ModuleNotFoundError):
    from hypothesis import settings as _hypothesis_settings

    _hypothesis_settings.register_profile("agglab", deadline=None)
    _hypothesis_settings.load_profile("agglab")


def pytest_configure(config):
    """In CI every skip must be on the allow-list (tests/skip_guard.py); every declared hang is
    told at the end (tests/hang_audit.py); each failure can be logged as it happens
    (tests/failure_log.py)."""
    try:
        from tests.failure_log import install as log_failures
        from tests.hang_audit import install as audit_hangs
        from tests.skip_guard import install
    except ModuleNotFoundError as exc:
        if exc.name != "tests":
            raise
        return              # a copy of this file outside the checkout (tests/test_timeout_guard.py)
    install(config)
    audit_hangs(config)     # every switch declared hung, and whether it was stopped (tests/hang_audit.py)
    log_failures(config)    # each failure at once to $AGGLAB_FAILURE_LOG, when set (tests/failure_log.py)


def _have_mininet() -> bool:
    return importlib.util.find_spec("mininet") is not None and shutil.which("mnexec") is not None


def _have_bmv2() -> bool:
    from agglab.controller.bmv2_tools import find_bmv2_tool

    return bool(find_bmv2_tool("simple_switch") and find_bmv2_tool("p4c"))


def _cluster_missing() -> str | None:
    if os.geteuid() != 0:
        return "needs root (a practice cluster makes namespaces and a bridge)"
    missing = [t for t in ("sshd", "ssh", "ssh-keygen", "unshare") if not (shutil.which(t) or Path(f"/usr/sbin/{t}").exists())]
    return f"needs {', '.join(missing)} (apt-get install openssh-server)" if missing else None
def _have_browser() -> bool:
    return (importlib.util.find_spec("selenium") is not None and shutil.which("chromium") is not None
            and shutil.which("chromedriver") is not None)


def pytest_collection_modifyitems(config, items):
    reasons = {
        "root": None if os.geteuid() == 0 else "needs root (network namespaces, raw sockets)",
        "mininet": None if _have_mininet() else "needs Mininet (apt-get install mininet; Debian's python3)",
        "bmv2": None if _have_bmv2() else "needs BMv2 simple_switch and p4c (the Vagrant VM has them)",
        "cluster": _cluster_missing(),
        "browser": None if _have_browser() else "needs chromium, chromium-driver (apt) and selenium (pip install -e '.[test]')",
    }
    for item in items:
        for marker, reason in reasons.items():
            if reason and item.get_closest_marker(marker):
                item.add_marker(pytest.mark.skip(reason=reason))


# -- a hang must never eat CI's time -----------------------------------------------------
NETWORK_MARKERS = ("root", "mininet", "bmv2", "cluster")
NETWORK_TIMEOUT = float(os.environ.get("AGGLAB_TEST_TIMEOUT", 300))   # seconds per network test
OTHER_TIMEOUT = 600.0


class TestTimeout(Exception):
    """Raised in the test's thread when its time is up; carries the switch logs."""


def _switch_logs(limit_lines: int = 40) -> str:
    """Tails of every switch/worker log of the runs alive now (read before teardown deletes them)."""
    from agglab.ground.paths import RUN_ROOT

    parts = []
    for log in sorted(RUN_ROOT.glob("*/*.log")) + sorted(RUN_ROOT.glob("*/*.out")) + sorted(RUN_ROOT.glob("*/*/*.log")):
        try:
            lines = log.read_text(errors="replace").splitlines()[-limit_lines:]
        except OSError:
            continue
        parts.append(f"--- {log} (last {len(lines)} lines)\n" + "\n".join(lines))
    return "\n".join(parts) or f"(no run logs under {RUN_ROOT})"


@pytest.fixture(autouse=True)
def _timeout(request):
    """SIGALRM per test: network tests get NETWORK_TIMEOUT (or @pytest.mark.net_timeout(s)),
    others OTHER_TIMEOUT. On expiry the test fails with the switch logs attached, and its own
    clean-up (context managers, finally blocks) still runs."""
    import signal

    if not hasattr(signal, "SIGALRM"):
        yield
        return
    marker = request.node.get_closest_marker("net_timeout")
    network = any(request.node.get_closest_marker(m) for m in NETWORK_MARKERS)
    seconds = marker.args[0] if marker else (NETWORK_TIMEOUT if network else OTHER_TIMEOUT)

    def expired(signum, frame):
        raise TestTimeout(f"{request.node.nodeid} ran over {seconds:.0f} s; switch and worker logs:\n"
                          + _switch_logs())

    with _network_turn(network):
        previous = signal.signal(signal.SIGALRM, expired)
        signal.setitimer(signal.ITIMER_REAL, seconds)
        try:
            yield
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)


# -- nothing left behind ------------------------------------------------------------------
def _builds_network(node) -> bool:
    return any(node.get_closest_marker(m) for m in NETWORK_MARKERS)


@pytest.fixture(autouse=True, scope="module")
def _module_leaves_nothing(request):
    """After a module whose tests build networks, its module-scoped fixtures (a conformance
    namespace, a software-switch lab) included: no namespace, interface or process of ours
    that was not there before the module."""
    network = any(_builds_network(item) for item in request.session.items
                  if item.module is request.module)
    if not network or os.geteuid() != 0:
        yield
        return
    from tests.leftovers import leftovers, new_leftovers

    with _network_turn(True):           # another checkout's network is not ours to count
        before = leftovers()
    yield
    with _network_turn(True):
        left = new_leftovers(before)
    assert not any(left.values()), f"{request.module.__name__} left behind: {left}"


@pytest.fixture(autouse=True)
def _test_leaves_nothing(request, _timeout):
    """After every test that builds a network (marked root, mininet or bmv2), while it still
    holds the network lock: nothing it made is left (compared with what existed when it began,
    so another checkout's runs and this module's shared fixtures do not count)."""
    if not _builds_network(request.node) or os.geteuid() != 0:
        yield
        return
    from tests import leftovers as lo

    before = lo.BASELINE = lo.leftovers()
    try:
        yield
    finally:
        lo.BASELINE = None
    if getattr(request.node, "rep_call", None) is not None and request.node.rep_call.skipped:
        return
    left = lo.new_leftovers(before)
    assert not any(left.values()), f"left behind: {left}"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Each phase's report on the test item (rep_setup, rep_call), for the fixtures above."""
    outcome = yield
    report = outcome.get_result()
    setattr(item, f"rep_{report.when}", report)


@contextlib.contextmanager
def _network_turn(network: bool):
    """With AGGLAB_NET_LOCK=PATH, a network test first takes an exclusive flock on PATH, so
    several checkouts' suites on one machine take turns per test instead of colliding on
    root-namespace interface names or loading each other's links. Unset (CI): no lock."""
    path = os.environ.get("AGGLAB_NET_LOCK")
    if not (network and path):
        yield
        return
    import fcntl

    with open(path, "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        # the commands this test starts run inside its turn: the experiment runner, which takes
        # the turn per point when AGGLAB_NET_LOCK is set, must not wait for it (experiments/runner.py)
        os.environ["AGGLAB_NET_TURN_HELD"] = "1"
        try:
            _until_no_other_network()
            yield
        finally:
            os.environ.pop("AGGLAB_NET_TURN_HELD", None)
            fcntl.flock(fh, fcntl.LOCK_UN)


def _until_no_other_network(limit: float = 900.0) -> None:
    """Also wait (at most `limit` s) while a network outside this lock holds the machine's
    lease alone (ground/netlease.py: an experiment or bench another checkout runs without the
    lock), so the test is not refused for the other network's sake. The wait is on the lease's
    release itself (a blocking look at its flock), and takes no part in the lease: the test's
    own runs register as every run does."""
    from agglab.ground.netlease import wait_while_held_alone

    wait_while_held_alone(limit=limit)
