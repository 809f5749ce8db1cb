"""The lab's command line on the live page, typed into in a real browser (Debian's chromium
through selenium), on a real lab (`agglab lab --web`, a subprocess, as a person opens it).

Typed on the page, as a student would: `allreduce 200000`, `fail a1 c1`, `wait`, `events`:
each command's output appears under it in order; the link is down in the kernel (`ip link`)
and drawn down; the allreduce ends exact; `events` has the link going down in words. A shell
command (`h1 ping`) is refused with one line, the arrows recall earlier lines, and nothing the
page's commands print reaches the lab's terminal (its events and the allreduce's outcome do).
Screenshots go to $AGGLAB_TEST_OUTPUT/web-console (default test-output/web-console).
"""

from __future__ import annotations

import os
import re
import shutil
import sys
from pathlib import Path

import pytest

from tests.leftovers import assert_clean
from tests.test_web import _browser, _kernel_up, _wait, run_namespace

pytestmark = [pytest.mark.root, pytest.mark.mininet, pytest.mark.browser, pytest.mark.slow,
              pytest.mark.net_timeout(900)]

REPO = Path(__file__).resolve().parent.parent
OUT = Path(os.environ.get("AGGLAB_TEST_OUTPUT", REPO / "test-output")) / "web-console"


def test_lab_commands_typed_into_the_page(tmp_path):
    import pexpect

    env = dict(os.environ, PYTHONPATH=str(REPO))
    lab = pexpect.spawn(sys.executable, ["-m", "agglab", "lab", "--web", "--topology", "fattree", "--k", "4",
                                         "--workers", "8", "--tree", "rat"],
                        cwd=str(tmp_path), env=env, encoding="utf-8", timeout=300)
    log = tmp_path / "lab.log"
    lab.logfile_read = open(log, "w")
    driver = None
    shutil.rmtree(OUT, ignore_errors=True)
    OUT.mkdir(parents=True)
    try:
        lab.expect(r"live page: (http://\S+)")
        url = lab.match.group(1)
        lab.expect_exact("agglab> ")
        driver = _browser()
        try:
            _type_commands(driver, url, lab)
        except AssertionError as exc:
            driver.save_screenshot(str(OUT / "failure.png"))
            entries = driver.execute_script("return window.agglabConsole && window.agglabConsole.entries")
            raise AssertionError(f"{exc}\nscreenshot: {OUT / 'failure.png'}\nconsole: {entries}") from None
    finally:
        if driver is not None:
            driver.quit()
        if lab.isalive():
            lab.sendline("exit")
            lab.expect(pexpect.EOF, timeout=120)
        lab.close()
    terminal = log.read_text()
    assert lab.exitstatus == 0, terminal[-3000:]
    # the page's commands printed on the page only: none of their lines is on the terminal
    for line in ("allreduce started in the background", "link a1-c1 down", "h1: not a lab command"):
        assert not re.search(rf"^\s*{re.escape(line)}", terminal, re.M), (line, terminal[-3000:])
    assert_clean()


def _entries(driver) -> list[dict]:
    return driver.execute_script("return window.agglabConsole.entries")


def _type(driver, line: str) -> dict:
    """Type a line and Enter into the page's command line; its entry once answered."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    n = len(_entries(driver))
    box = driver.find_element(By.ID, "console-in")
    box.send_keys(line)
    box.send_keys(Keys.ENTER)
    # its entry, once answered (an allreduce's outcome the page shows on its own may come first)
    return _wait(f"the page's answer to {line!r}", lambda: next(
        (e for e in _entries(driver)[n:] if e["command"] == line and e["ok"] is not None), None), 300, every=0.1)


def _type_commands(driver, url: str, lab) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    driver.get(url)
    _wait("the first sample", lambda: driver.execute_script("return agglab.samples > 1"))
    topo = driver.execute_script("return agglab.topology")
    link = next(l for l in topo["links"] if {l["a"], l["b"]} == {"a1", "c1"})

    started = _type(driver, "allreduce 200000")
    assert (started["ok"], started["output"]) == (True, "allreduce started in the background"), started
    failed = _type(driver, "fail a1 c1")
    assert (failed["ok"], failed["output"]) == (True, "link a1-c1 down"), failed
    assert not _kernel_up(link["intf"], run_namespace(lab.pid))
    _wait("a1-c1 drawn down", lambda: driver.execute_script(
        "return agglab.cy.$id(arguments[0]).hasClass('down')", link["id"]), 30)
    driver.save_screenshot(str(OUT / "01-failed.png"))

    waited = _type(driver, "wait")
    # the outcome: `wait` waits for it, or says it as the last one if the allreduce was done already
    assert waited["ok"] and "allreduce: exact, 200000 int32 x 8 workers" in waited["output"], waited
    events = _type(driver, "events")
    assert events["ok"] and re.search(r"link (a1-c1|c1-a1) went down", events["output"]), events
    assert all(line.startswith("  ") for line in events["output"].splitlines()), events

    refused = _type(driver, "h1 ping -c1 h2")
    assert refused["ok"] is False and refused["status"] == 400, refused
    assert refused["output"].startswith("h1: not a lab command") and "\n" not in refused["output"], refused

    # in order, each under its command, on the page itself
    shown = driver.find_element(By.ID, "console-out").text
    order = [shown.index(f"agglab> {c}") for c in ("allreduce 200000", "fail a1 c1", "wait", "events", "h1 ping")]
    assert order == sorted(order), shown
    assert shown.index("link a1-c1 down") > shown.index("agglab> fail a1 c1"), shown
    driver.save_screenshot(str(OUT / "02-typed.png"))

    # history: up recalls the last lines, newest first; down goes back
    box = driver.find_element(By.ID, "console-in")
    box.send_keys(Keys.ARROW_UP)
    assert box.get_attribute("value") == "h1 ping -c1 h2"
    box.send_keys(Keys.ARROW_UP)
    assert box.get_attribute("value") == "events"
    box.send_keys(Keys.ARROW_DOWN)
    assert box.get_attribute("value") == "h1 ping -c1 h2"
    box.send_keys(Keys.ARROW_UP, Keys.ARROW_UP, Keys.ARROW_UP)
    assert box.get_attribute("value") == "fail a1 c1"
    n = len(_entries(driver))
    box.send_keys(Keys.ENTER)                     # again: the link is already down, and it says so
    again = _wait("the repeated fail's answer", lambda: next(
        (e for e in _entries(driver)[n:] if e["command"] == "fail a1 c1" and e["ok"] is not None), None), 60)
    assert again["output"] == "link a1-c1 is already down: nothing to do", again

    # the terminal still works, and its prompt came back after each of the page's events
    lab.sendline("progress")
    lab.expect("no allreduce is running; the last one: allreduce: exact", timeout=60)
