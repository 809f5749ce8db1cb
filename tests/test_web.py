"""The live page in a real browser (Debian's chromium through selenium), on a real lab.

One k=4 fat-tree lab with 8 workers (`agglab lab --web`, a subprocess, as a person opens
it): the page shows its 20 switches and 16 hosts; an allreduce started from the page runs;
a click on a link of an active tree takes that link down, which is checked in the kernel
(`ip link`), not on the page; the page then shows epoch 1, trees that avoid the link and
the reroute's phases; the allreduce ends exact. Also: a request without the token gets 403,
and nothing listens on an address other than the loopback. The page's update latency (a
link set down in the kernel -> the page draws it down) is measured and printed.

Screenshots of every step go to $AGGLAB_TEST_OUTPUT/web (default test-output/web); a
failure names them and adds one of the page as it was. AGGLAB_DOC_SCREENSHOT=1 also copies
the reroute step to docs/guide/img/web.png.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from agglab.ground import netns
from agglab.testkit.waits import wait_until
from tests.leftovers import assert_clean

pytestmark = [pytest.mark.root, pytest.mark.mininet, pytest.mark.browser, pytest.mark.slow,
              pytest.mark.net_timeout(900)]

REPO = Path(__file__).resolve().parent.parent
OUT = Path(os.environ.get("AGGLAB_TEST_OUTPUT", REPO / "test-output")) / "web"


class Steps:
    """Numbered screenshots; on failure, the paths and the page's last event lines."""

    def __init__(self, driver):
        self.driver, self.paths, self.n = driver, [], 0
        shutil.rmtree(OUT, ignore_errors=True)
        OUT.mkdir(parents=True)

    def shot(self, name: str) -> Path:
        self.n += 1
        path = OUT / f"{self.n:02d}-{name}.png"
        self.driver.save_screenshot(str(path))
        self.paths.append(path)
        return path

    def attach(self) -> str:
        try:
            self.shot("failure")
            events = self.driver.execute_script("return document.getElementById('events').textContent")
        except Exception as exc:  # noqa: BLE001 - the browser may be the problem
            events = f"(page unreadable: {exc})"
        return "\nscreenshots:\n" + "\n".join(f"  {p}" for p in self.paths) + f"\npage events:\n{events[-3000:]}"


def _wait(what: str, cond, timeout: float = 60.0, every: float = 0.05):
    return wait_until(cond, timeout, what, every)


def run_namespace(pid: int) -> str:
    """The network namespace of the run that process `pid` owns: the run's links live there,
    not in the root namespace (ground/netns.py names it after its owner)."""
    found = [n for n in netns.names() if netns.owner_of(n) == pid]
    assert len(found) == 1, f"run namespaces of pid {pid}: {found} (all: {netns.names()})"
    return found[0]


def _kernel_up(intf: str, ns: str) -> bool:
    """IFF_UP of an interface in namespace `ns`, as `ip link` reports it (flags <...,UP,...>)."""
    out = subprocess.run(["ip", "-n", ns, "-o", "link", "show", "dev", intf], capture_output=True, text=True).stdout
    flags = re.search(r"<([^>]*)>", out)
    assert flags, f"ip -n {ns} link show dev {intf}: {out!r}"
    return "UP" in flags.group(1).split(",")


def _ip_link(intf: str, state: str, ns: str) -> None:
    r = subprocess.run(["ip", "-n", ns, "link", "set", "dev", intf, state], capture_output=True, text=True)
    assert r.returncode == 0, f"ip -n {ns} link set dev {intf} {state}: {r.stderr.strip()}"


def _listeners(port: int) -> list[str]:
    """Local addresses with a listening TCP socket on `port` (/proc/net/tcp and tcp6, state 0A)."""
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            addr, p = local.rsplit(":", 1)
            if state == "0A" and int(p, 16) == port:
                found.append(addr)
    return found


def _browser():
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = shutil.which("chromium")
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1600,1000",
                "--disable-gpu"):
        opts.add_argument(arg)
    return webdriver.Chrome(service=Service(shutil.which("chromedriver")), options=opts)


def _click_link(driver, link: str) -> None:
    """A real mouse click on the drawn link (the middle of its line on the canvas)."""
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By

    box = driver.find_element(By.ID, "cy")
    mid = driver.execute_script(
        "const e = agglab.cy.$id(arguments[0]); const p = e.renderedMidpoint();"
        "const r = document.getElementById('cy').getBoundingClientRect(); return [p.x, p.y, r.width, r.height];", link)
    x, y, w, h = mid
    ActionChains(driver).move_to_element_with_offset(box, int(x - w / 2), int(y - h / 2)).click().perform()


def _click_node(driver, node: str) -> None:
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By

    box = driver.find_element(By.ID, "cy")
    x, y, w, h = driver.execute_script(
        "const p = agglab.cy.$id(arguments[0]).renderedPosition();"
        "const r = document.getElementById('cy').getBoundingClientRect(); return [p.x, p.y, r.width, r.height];", node)
    ActionChains(driver).move_to_element_with_offset(box, int(x - w / 2), int(y - h / 2)).click().perform()


def test_live_page_in_a_browser(tmp_path):
    import pexpect

    env = dict(os.environ, PYTHONPATH=str(REPO))
    lab = pexpect.spawn(sys.executable, ["-m", "agglab", "lab", "--web", "--topology", "fattree", "--k", "4",
                                         "--workers", "8", "--tree", "rat", "--bw", "10"],
                        cwd=str(tmp_path), env=env, encoding="utf-8", timeout=300)
    lab.logfile_read = open(tmp_path / "lab.log", "w")
    driver = steps = None
    try:
        lab.expect(r"live page: (http://\S+)")
        url = lab.match.group(1)
        lab.expect_exact("'exit' to quit")
        lab.expect_exact("agglab> ")
        base, token = url.split("/?token=")
        port = int(base.rsplit(":", 1)[1])

        # the token and the loopback
        with pytest.raises(urllib.error.HTTPError, match="HTTP Error 403") as no_token:
            urllib.request.urlopen(base + "/", timeout=10)
        assert no_token.value.code == 403
        with pytest.raises(urllib.error.HTTPError, match="HTTP Error 403") as wrong:
            urllib.request.urlopen(base + "/api/state?token=not" + token, timeout=10)
        assert wrong.value.code == 403
        listening = _listeners(port)
        assert listening and all(a in ("0100007F", "00000000000000000000000001000000") for a in listening), listening

        driver = _browser()
        steps = Steps(driver)
        try:
            _run_steps(driver, steps, url, lab)
        except AssertionError as exc:
            raise AssertionError(f"{exc}{steps.attach()}") from None
    finally:
        if driver is not None:
            driver.quit()
        if lab.isalive():
            lab.sendline("exit")
            lab.expect(pexpect.EOF, timeout=120)
        lab.close()
    assert lab.exitstatus == 0, (tmp_path / "lab.log").read_text()[-3000:]
    assert_clean()


def _texts(driver, css: str) -> list[str]:
    """The text of every element `css` selects, read at once (the page rebuilds its tables
    on every sample: an element found first and read after may be gone)."""
    return driver.execute_script("return [...document.querySelectorAll(arguments[0])].map(e => e.textContent)", css)


def _state(driver) -> dict:
    return driver.execute_script("return agglab.state") or {}


def _events_in_words(driver, steps: Steps) -> None:
    """The event list reads as the lab prints it (agglab/event_words.py): the reroute is a
    sentence, its raw fields are each line's tooltip and show under it with "raw fields" ticked."""
    from selenium.webdriver.common.by import By

    def lines():
        return driver.execute_script("return [...document.querySelectorAll('#events .event')]"
                                     ".map(e => [e.textContent, e.title])")

    _wait("the reroute in words in the event list",
          lambda: any("rerouted around link" in text for text, _ in lines()), 30)
    text, title = next((t, r) for t, r in lines() if "rerouted around link" in t)
    assert title.startswith("rerouted ") and "link=" in title and "link=" not in text, (text, title)
    driver.find_element(By.ID, "events-raw").click()
    _wait("the raw fields under the words", lambda: any(
        "rerouted around link" in t and f"[{r}]" in t for t, r in lines()), 10)
    steps.shot("events-raw")
    driver.find_element(By.ID, "events-raw").click()
    _wait("the raw fields hidden again", lambda: not any(f"[{r}]" in t for t, r in lines()), 10)


def _run_steps(driver, steps: Steps, url: str, lab) -> None:
    from selenium.webdriver.common.by import By

    driver.get(url)
    _wait("the first sample", lambda: driver.execute_script("return agglab.samples > 1"))
    # the k=4 fat-tree by its definition: (k/2)^2 + k*k/2 + k*k/2 = 20 switches, k^3/4 = 16 hosts
    counts = driver.execute_script("return [agglab.cy.nodes('.switch').length, agglab.cy.nodes('.host').length]")
    assert counts == [20, 16], counts
    assert driver.find_element(By.ID, "counts").text == "20 switches, 16 hosts"
    assert driver.find_element(By.ID, "epoch").text.startswith("epoch 0")
    steps.shot("topology")

    # start an allreduce from the page
    field = driver.find_element(By.ID, "elements")
    field.clear()
    field.send_keys("4000000")          # about 30 s at 10 Mb/s: the click lands while it runs
    driver.find_element(By.ID, "start").click()
    _wait("the allreduce to make progress", lambda: (_state(driver).get("run") or {}).get("running")
          and _state(driver)["run"].get("done", 0) > 0, 120, every=0.02)
    steps.shot("allreduce-running")

    # click a switch-to-switch link of an active tree
    topo = driver.execute_script("return agglab.topology")
    kind = {n["id"]: n["kind"] for n in topo["nodes"]}
    intf = {l["id"]: l["intf"] for l in topo["links"]}
    job = _state(driver)["jobs"][0]
    link = next(e for t in job["trees"] for e in t["edges"] if all(kind[n] == "switch" for n in e.split("-")))
    ns = run_namespace(lab.pid)
    assert _kernel_up(intf[link], ns)
    _click_link(driver, link)
    _wait(f"link {link} down in the kernel", lambda: not _kernel_up(intf[link], ns), 30, every=0.005)
    assert _state(driver)["run"]["running"], "the allreduce ended before the link failed: make it longer"
    # the page: epoch 1, trees that avoid the link, the reroute and its phases
    _wait("epoch 1 on the page", lambda: driver.find_element(By.ID, "epoch").text.startswith("epoch 1"), 30)
    _wait(f"{link} drawn down", lambda: driver.execute_script("return agglab.cy.$id(arguments[0]).hasClass('down')",
                                                               link), 30)
    cells = "#reroutes tbody tr:first-child td"
    _wait("the reroute's row with every phase", lambda: _texts(driver, cells) and "–" not in _texts(driver, cells), 30)
    st = _state(driver)
    trees = st["jobs"][0]["trees"]
    assert trees and all(link not in t["edges"] for t in trees), (link, trees)
    drawn = driver.execute_script("return agglab.cy.edges('.tree').map(e => e.data('link'))")
    assert drawn and link not in drawn
    row = _texts(driver, cells)
    assert set(row[0].split("-")) == set(link.split("-")) and row[1] == "1", row
    assert all(float(x) >= 0 for x in row[2:9]), row           # detect, recompute, install, phases: measured
    path = steps.shot("rerouted")
    _events_in_words(driver, steps)
    if os.environ.get("AGGLAB_DOC_SCREENSHOT"):
        shutil.copy(path, REPO / "docs" / "guide" / "img" / "web.png")

    # the allreduce ends exact (the page says so, and so does the lab's prompt)
    _wait("the allreduce's end", lambda: "allreduce: " in driver.find_element(By.ID, "runline").text, 300, every=0.2)
    assert driver.find_element(By.ID, "runline").text.startswith("allreduce: exact"), \
        driver.find_element(By.ID, "runline").text
    lab.expect("allreduce: exact", timeout=30)
    steps.shot("allreduce-exact")

    # update latency: a link set down in the kernel (a non-worker host's, on no tree) -> drawn down
    idle = next(l["id"] for l in topo["links"] if any(kind[n] == "host" and n not in
                {n2["id"] for n2 in topo["nodes"] if n2["rank"] is not None} for n in l["id"].split("-")))
    latencies = []
    for _ in range(5):
        t0 = time.time() * 1e3
        _ip_link(intf[idle], "down", ns)
        seen = _wait("the page to draw the link down",
                     lambda: driver.execute_script("return agglab.seenDown[arguments[0]]", idle), 10, every=0.01)
        latencies.append(seen - t0)
        _ip_link(intf[idle], "up", ns)
        _wait("the page to draw it up", lambda: driver.execute_script(
            "return !(arguments[0] in agglab.seenDown)", idle), 10, every=0.01)
    load = Path("/proc/loadavg").read_text().split()[:3]
    print(f"\npage update latency (kernel link down -> page), 5 trials: median {statistics.median(latencies):.0f} ms, "
          f"max {max(latencies):.0f} ms (sampling period 250 ms; load average {' '.join(load)})")
    (OUT / "latency.json").write_text(json.dumps({"ms": latencies, "loadavg": load}))
    steps.shot("after-latency")

    # kill and restart a core switch from the page: its process really dies and comes back
    core = next(n["id"] for n in topo["nodes"] if n["tier"] == "core")
    _click_node(driver, core)
    _wait(f"{core} selected", lambda: driver.find_element(By.ID, "selected").text == core, 10)
    driver.find_element(By.ID, "kill").click()
    _wait(f"{core} drawn dead", lambda: driver.execute_script("return agglab.cy.$id(arguments[0]).hasClass('dead')",
                                                                 core), 60)
    assert core in _state(driver)["dead"]
    steps.shot("switch-killed")
    driver.find_element(By.ID, "restart").click()
    _wait(f"{core} alive again", lambda: core not in _state(driver).get("dead", [core]), 60)
    _wait(f"{core}'s counters again", lambda: (_state(driver)["switches"].get(core) or {}).get("alive"), 30)
    steps.shot("switch-restarted")
