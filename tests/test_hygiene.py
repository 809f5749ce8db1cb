"""Tests that cannot lie: the patterns that made tests pass or fail with the machine's load, or
pass whatever the code did, are kept out of tests/ by reading the tests' syntax trees.

Why: docs/guide/testing.md promises no wall-clock assertion and no sleep used as
synchronisation (CI is a loaded 2-core machine), and every `pytest.raises` naming the message it
expects (a bare one passes on any error of that type, a typo in the input included). A reading of
the tests line by line found each promise broken in places; this keeps them from coming back.

- `time.sleep` (and its disguises: `Event().wait(s)` on a fresh event, a `sleep` subprocess) only
  in the functions SLEEPS lists, each with why the sleep is the thing under test or a poll of an
  event no helper can wait on; waiting for something is `agglab.testkit.waits.wait_until`;
- no `assert` on a reading of the clock (`time.time()`, `monotonic()`, `perf_counter()`, or a
  name computed from one in the same function): a hang guard is wait_until's deadline;
- no lab script in a test waits for the controller with a shell sleep between its commands;
- every `pytest.raises` has `match=`;
- no Hypothesis `settings` sets a deadline (tests/conftest.py's profile sets deadline=None).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent

# (file under tests/, enclosing function): why its sleep stays. Nothing else in tests/ sleeps.
SLEEPS = {
    ("test_switch_hang.py", "slowly"):
        "the slowness under test, not a wait: the jobs take 0.5 s to handle a failure, as under "
        "load, which makes the old race between a restart and the watcher's ports-down likely; "
        "the test then waits on the watcher's own event, so no load can fail it",
}
# A child process's body that must stay blocked (e.g. "time.sleep(300)" in a script string, a
# `sleep 60` process to stop or enter) is not code of the test and is not read here; those
# bodies are killed or end on the event they wait for. What is read in strings: a lab script's
# `sh sleep N` between its commands (waiting for the controller by the clock).

# (file, function): why an assert there may read the clock. It orders time stamps; it bounds no
# duration, so the machine's load cannot fail it.
CLOCK_ORDERS = {
    ("test_softswitch_daemon.py", "test_pcaps_are_written_and_readable"):
        "the capture's time stamp lies between the send and the receive: which clock pcap uses",
    ("test_cluster_pieces.py", "test_a_forwarded_link_event_is_dated_when_the_head_gets_it"):
        "a forwarded link event is dated after the change was made and before it is read: "
        "the order of three readings of one clock",
}

CLOCKS = {"time", "monotonic", "perf_counter", "monotonic_ns", "perf_counter_ns", "time_ns"}


def _is_sleep(call: ast.Call) -> bool:
    f = call.func
    if isinstance(f, ast.Attribute) and f.attr == "sleep" and isinstance(f.value, ast.Name) \
            and f.value.id in ("time", "asyncio"):
        return not (f.value.id == "asyncio")          # an event loop yields in asyncio.sleep
    if isinstance(f, ast.Name) and f.id == "sleep":
        return True
    if isinstance(f, ast.Attribute) and f.attr == "wait" and isinstance(f.value, ast.Call) \
            and getattr(f.value.func, "attr", getattr(f.value.func, "id", None)) == "Event":
        return True                                   # threading.Event().wait(s): nobody sets it
    if isinstance(f, ast.Attribute) and f.attr in ("run", "call", "check_call") and call.args \
            and isinstance(call.args[0], ast.List) and call.args[0].elts \
            and isinstance(call.args[0].elts[0], ast.Constant) and call.args[0].elts[0].value == "sleep":
        return True                                   # subprocess.run(["sleep", "0.1"])
    return False


def _is_clock(call: ast.Call) -> bool:
    f = call.func
    if isinstance(f, ast.Attribute) and f.attr in CLOCKS and isinstance(f.value, ast.Name) and f.value.id == "time":
        return True
    return isinstance(f, ast.Name) and f.id in ("monotonic", "perf_counter")


def _names(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def _reads_clock(node: ast.AST, tainted: set[str]) -> bool:
    return any(isinstance(n, ast.Call) and _is_clock(n) for n in ast.walk(node)) or bool(_names(node) & tainted)


def _scopes(tree: ast.Module):
    """(name, node) of the module and of every function, each with its own body only."""
    yield "<module>", tree
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield node.name, node


def _own_nodes(scope: ast.AST):
    """The nodes of `scope` outside the functions nested in it."""
    todo = list(ast.iter_child_nodes(scope))
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)) and node is not scope:
            if isinstance(node, ast.Lambda):
                todo.extend(ast.iter_child_nodes(node))
            continue
        yield node
        todo.extend(ast.iter_child_nodes(node))


def violations(path: Path, rel: str, sleeps: dict = SLEEPS, clock_orders: dict = CLOCK_ORDERS) -> list[str]:
    """What in the test file at `path` (named `rel` under tests/) breaks the rules above."""
    tree = ast.parse(path.read_text(), filename=str(path))
    found = []
    for name, scope in _scopes(tree):
        nodes = sorted(_own_nodes(scope), key=lambda n: getattr(n, "lineno", 0))
        tainted: set[str] = set()
        for node in nodes:                            # names that hold a reading of the clock
            if isinstance(node, ast.Assign) and _reads_clock(node.value, tainted):
                tainted |= {t.id for tgt in node.targets for t in ast.walk(tgt) if isinstance(t, ast.Name)}
        for node in nodes:
            where = f"{rel}:{getattr(node, 'lineno', '?')} ({name})"
            if isinstance(node, ast.Call) and _is_sleep(node) and (rel, name) not in sleeps:
                found.append(f"{where}: sleep used to wait; wait_until the event, or list it in SLEEPS")
            if isinstance(node, ast.Assert) and _reads_clock(node.test, tainted) and (rel, name) not in clock_orders:
                found.append(f"{where}: an assert on the wall clock")
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "raises" \
                    and getattr(node.func.value, "id", None) == "pytest" \
                    and not any(k.arg == "match" for k in node.keywords):
                found.append(f"{where}: pytest.raises without match=")
            if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", None)) == "settings" \
                    and any(k.arg == "deadline" and not (isinstance(k.value, ast.Constant) and k.value.value is None)
                            for k in node.keywords):
                found.append(f"{where}: a Hypothesis deadline (the conftest profile has none)")
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and LAB_SLEEP.search(node.value):
                found.append(f"{where}: a lab script's `sh sleep` waits by the clock; wait on the event")
    return found


LAB_SLEEP = re.compile(r"(^|\n)\s*sh\s+sleep\b")


def _test_files():
    return sorted(p for p in TESTS.rglob("*.py") if "__pycache__" not in p.parts)


@pytest.mark.parametrize("path", _test_files(), ids=lambda p: str(p.relative_to(TESTS)))
def test_the_tests_keep_the_rules(path):
    found = violations(path, str(path.relative_to(TESTS)))
    assert found == [], "\n".join(found)


def test_every_listed_exception_is_still_there():
    """A whitelist entry whose sleep (or clock assert) is gone would let a new one in unseen."""
    for rel, func in SLEEPS:
        scope = dict(_scopes(ast.parse((TESTS / rel).read_text())))[func]
        assert any(isinstance(n, ast.Call) and _is_sleep(n) for n in _own_nodes(scope)), (rel, func)
    for rel, func in CLOCK_ORDERS:
        unlisted = violations(TESTS / rel, rel, clock_orders={})
        assert any(f"({func}): an assert on the wall clock" in v for v in unlisted), (rel, func)


def test_hypothesis_runs_without_a_deadline():
    from hypothesis import settings

    assert settings.default.deadline is None


PLANTED = '''
import time
import threading
import pytest
from hypothesis import settings


def test_quick():
    t0 = time.monotonic()
    work()
    assert time.monotonic() - t0 < 1.0


def test_quick_by_name():
    start = time.perf_counter()
    work()
    took = time.perf_counter() - start
    assert took < 0.5, took


def test_sleeps():
    start()
    time.sleep(0.5)
    threading.Event().wait(0.2)
    assert done()


def test_raises():
    with pytest.raises(ValueError):
        parse("x")


@settings(deadline=200)
def test_deadline():
    pass
'''


def test_a_planted_wall_clock_assert_and_each_other_pattern_is_caught(tmp_path):
    scratch = tmp_path / "test_planted.py"
    scratch.write_text(PLANTED)
    found = violations(scratch, "test_planted.py")
    assert [f.split(": ", 1)[1] for f in found] == [
        "an assert on the wall clock", "an assert on the wall clock",
        "sleep used to wait; wait_until the event, or list it in SLEEPS",
        "sleep used to wait; wait_until the event, or list it in SLEEPS",
        "pytest.raises without match=",
        "a Hypothesis deadline (the conftest profile has none)"], found
    assert [f.split(" ")[0] for f in found] == ["test_planted.py:11", "test_planted.py:18", "test_planted.py:23",
                                                "test_planted.py:24", "test_planted.py:29", "test_planted.py:33"]
    assert violations(scratch, "test_planted.py", sleeps={("test_planted.py", "test_sleeps"): "planted"})[2:4] \
        == found[4:6]                                   # a listed sleep is allowed, only there


def test_a_deadline_guard_by_hand_is_caught(tmp_path):
    """The old hang guard (`assert time.monotonic() < deadline`) is a clock assert too: wait_until."""
    scratch = tmp_path / "test_guard.py"
    scratch.write_text("import time\n\ndef test_x():\n    deadline = time.monotonic() + 30\n"
                       "    while not ready():\n        assert time.monotonic() < deadline, 'never'\n")
    assert violations(scratch, "test_guard.py") == ["test_guard.py:6 (test_x): an assert on the wall clock"]


def test_a_lab_script_sleeping_between_commands_is_caught(tmp_path):
    scratch = tmp_path / "test_lab_script.py"
    scratch.write_text('def test_x(tmp_path):\n    (tmp_path / "s").write_text("fail a1 c1\\nsh sleep 5\\ntrees\\n")\n'
                       'CHILD = "import time; time.sleep(60)"\n')
    assert violations(scratch, "test_lab_script.py") == [
        "test_lab_script.py:2 (test_x): a lab script's `sh sleep` waits by the clock; wait on the event"]
