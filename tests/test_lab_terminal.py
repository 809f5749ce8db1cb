"""The lab in a terminal, typed into as a person does (pexpect, a real pty): Mininet's own
commands print what Mininet prints, ping works, Ctrl-C during an allreduce stops only that
allreduce (the network, the failed link and the epoch stay), and `show` marks the failed
link. What to expect is derived from the k=4 fat-tree's definition (48 links: 16 host
links, 16 edge-aggregation, 16 aggregation-core), not from the lab's code."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import pytest

from tests.leftovers import assert_clean

pytestmark = [pytest.mark.root, pytest.mark.mininet, pytest.mark.slow, pytest.mark.net_timeout(900)]

REPO = Path(__file__).resolve().parent.parent
PROMPT = "agglab> "


def test_lab_as_typed_in_a_terminal(tmp_path):
    import pexpect

    lab = pexpect.spawn(sys.executable, ["-m", "agglab", "lab", "--topology", "fattree", "--k", "4", "--workers", "8",
                                         "--tree", "rat", "--bw", "10"],
                        cwd=str(tmp_path), env=dict(os.environ, PYTHONPATH=str(REPO)), encoding="utf-8",
                        timeout=300, dimensions=(50, 200))
    log = open(tmp_path / "lab.log", "w")
    lab.logfile_read = log

    def typed(line: str, timeout: float = 120, want: str | None = None) -> str:
        """Type a line; the output up to the prompt, or (with `want`, a regex) up to the prompt
        after it appears: an event printed above the prompt redraws the prompt too."""
        lab.sendline(line)
        out = ""
        while True:
            lab.expect_exact(PROMPT, timeout=timeout)
            out += lab.before
            if want is None or re.search(want, out):
                return out

    try:
        lab.expect_exact("'exit' to quit")
        lab.expect_exact(PROMPT)
        out = typed("nodes", want="available nodes")
        assert "available nodes are:" in out
        names = set(out.split("available nodes are:")[1].split())
        assert {f"c{i}" for i in range(1, 5)} | {f"h{i}" for i in range(1, 17)} <= names
        out = typed("links", want="<->")
        assert len(re.findall(r"\S+<->\S+ \(OK OK\)", out)) == 48, out
        out = typed("h1 ping -c1 -W5 h2", want="packets transmitted")
        assert "1 packets transmitted, 1 received" in out, out
        assert "hello" in typed("h1 echo hello", want="hello")
        assert "<Host h1:" in typed("dump", want="<Host h1:")

        # a failed tree link: epoch 1
        typed("fail a1 c1", timeout=60, want="rerouted around .*: epoch 1")
        assert "epoch 1" in typed("trees", want="epoch")

        # Ctrl-C during an allreduce: back at the prompt, the lab intact
        assert "allreduce started" in typed("allreduce 3000000", want="allreduce started|already")
        lab.sendline("wait")
        lab.expect(r"\d+/\d+ blocks \(\d+%\)", timeout=120)     # wait's progress line
        lab.sendintr()
        lab.expect("allreduce cancelled", timeout=60)
        lab.expect_exact(PROMPT, timeout=60)
        assert "allreduce cancelled" not in lab.before            # said once
        assert lab.isalive()
        assert "no allreduce is running" in typed("progress", want="allreduce")
        assert "last allreduce: cancelled" in typed("jobs", want="last allreduce")
        # Ctrl-C at the prompt asks; "n" keeps the lab (and its failed link)
        lab.sendintr()
        lab.expect_exact("end the lab?", timeout=30)
        lab.sendline("n")
        lab.expect_exact("the lab goes on", timeout=30)
        lab.expect_exact(PROMPT, timeout=30)
        assert lab.isalive()
        assert "epoch 1" in typed("trees", want="epoch")
        out = typed("show", want="drawing written")
        assert "links down: a1-c1" in out, out
        assert re.search(r"-a1-c1 \(down\)", out), out               # epoch 0's tree lost that link
        assert (tmp_path / "agglab-trees-epoch1.svg").exists()
        assert "1 packets transmitted, 1 received" in typed("h1 ping -c1 -W5 h3", want="packets transmitted")

        # the network still aggregates, around the failed link
        typed("allreduce 50000", want="allreduce started")
        lab.expect(r"allreduce: (exact|NOT EXACT)", timeout=300)
        assert lab.match.group(1) == "exact"
        out = typed("stats", want="explained|first copies")
        assert re.search(r"^\s+contributions\s+first copies", out, re.M), out    # each counter explained
        lab.sendline("exit")
        lab.expect(pexpect.EOF, timeout=120)
    finally:
        if lab.isalive():
            lab.terminate(force=True)
        log.close()
    lab.close()
    assert lab.exitstatus == 0, (tmp_path / "lab.log").read_text()[-3000:]
    assert_clean()
