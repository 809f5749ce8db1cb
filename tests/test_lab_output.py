"""What the lab prints, driven in-process through its command handler (agglab/lab.py's LabCLI)
on a stand-in session: no network, no root. Each case is a rough edge a student met in their
first hour: a cancelled allreduce reported as "NOT EXACT in None s", "allreduce cancelled"
printed twice, Ctrl-C at the prompt ending the lab unasked, `wait` and `recover` printing
nothing, events as raw key=value.

agglab.lab subclasses Mininet's CLI, so it is imported inside the tests (the marker skips
them without Mininet)."""

from __future__ import annotations

import io
import os
import signal
import threading
from types import SimpleNamespace

import networkx as nx
import pytest

from agglab.controller.events import EventLog
from agglab.ground import wire

pytest.importorskip("mininet.cli")


class _Spec:
    def with_(self, **opts):
        return self

    def loss_of(self, index):
        return 0.0


def _session(allreduce=None):
    g = nx.Graph()
    g.add_nodes_from(("a1", "c1"), kind="switch")
    g.add_edge("a1", "c1")
    job = SimpleNamespace(job=0, workers=["h1", "h2"], trees=lambda: None, switch_stats=lambda: {},
                          state=lambda: SimpleNamespace(tree="rat", algorithm="switchml", window=16,
                                                        treeset=SimpleNamespace(trees=[], epoch=0)),
                          read_registers=lambda sw, names: {n: [0] * 2 * wire.SLOTS for n in names})
    changes = []
    net = SimpleNamespace(net={}, run=None, set_link=lambda a, b, up: changes.append((a, b, up)) or 1.0)
    session = SimpleNamespace(job=job, jobs=[job], spec=_Spec(), g=g, net=net, events=EventLog(),
                              cancelled=threading.Event(), last_result=None, changes=changes,
                              allreduce=allreduce or (lambda **opts: {"exact": True}))
    session.cancel = session.cancelled.set
    return session


@pytest.fixture
def lab(tmp_path):
    """A LabCLI on a stand-in session, reading `answers` (a StringIO the test fills) as stdin."""
    from agglab.actions import Actions
    from agglab.lab import LabCLI

    def make(session):
        script = tmp_path / "empty.lab"
        script.write_text("")
        with open(os.devnull) as quiet:
            cli = LabCLI(session, [], Actions(session, say=print), stdin=quiet, script=str(script))
        cli.inputFile = None                # from here on, as if typed at the prompt
        cli.stdin = io.StringIO()
        cli.isatty = lambda: False
        return cli
    return make


def _blocking_session():
    """A session whose allreduce runs until it is cancelled, then returns what a cancelled run
    leaves: no figures."""
    started = threading.Event()
    holder = {}

    def allreduce(**opts):
        started.set()
        holder["s"].cancelled.wait(30)
        result = {"exact": False, "jobs": [{"job": 0, "exact": False, "seconds": None, "packets": None,
                                            "retransmissions": None, "loss": 0.0}]}
        holder["s"].last_result = result
        return result

    s = holder["s"] = _session(allreduce)
    return s, started


def test_a_cancelled_allreduce_says_cancelled_once_and_jobs_says_so(lab, capsys):
    session, started = _blocking_session()
    cli = lab(session)
    cli.onecmd("allreduce 1000")
    assert started.wait(30)
    cli.onecmd("cancel")
    out = capsys.readouterr().out
    assert out.count("allreduce cancelled") == 1, out
    cli.onecmd("jobs")
    out = capsys.readouterr().out
    assert "last allreduce: cancelled" in out and "None" not in out, out


def test_ctrl_c_during_an_allreduce_cancels_it_once(lab, capsys, monkeypatch):
    from agglab.ground.interrupts import Interrupted

    session, started = _blocking_session()
    cli = lab(session)
    cli.onecmd("allreduce 1000")
    assert started.wait(30)
    calls = iter([Interrupted(signal.SIGINT), None])

    def cmdloop():
        exc = next(calls)
        if exc:
            raise exc
    monkeypatch.setattr(cli, "cmdloop", cmdloop)
    monkeypatch.setattr("agglab.lab.arm", lambda: {})
    cli.run()
    out = capsys.readouterr().out
    assert out.count("allreduce cancelled") == 1, out


@pytest.mark.parametrize("answer, ends", [("\n", False), ("n\n", False), ("y\n", True), ("", True)])
def test_ctrl_c_at_the_prompt_asks_before_it_ends_the_lab(lab, capsys, monkeypatch, answer, ends):
    from agglab.ground.interrupts import Interrupted

    cli = lab(_session())
    cli.stdin = io.StringIO(answer)
    loops = []

    def cmdloop():
        loops.append(1)
        if len(loops) == 1:
            raise Interrupted(signal.SIGINT)
    monkeypatch.setattr(cli, "cmdloop", cmdloop)
    monkeypatch.setattr("agglab.lab.arm", lambda: {})
    if ends:
        with pytest.raises(Interrupted, match="SIGINT"):
            cli.run()
        assert loops == [1]
    else:
        cli.run()
        assert loops == [1, 1]                  # back at the prompt
    out = capsys.readouterr().out
    assert "Ctrl-C: end the lab?" in out
    assert ("the lab goes on" in out) != ends


def test_every_command_prints_something_when_idle(lab, capsys):
    session = _session()
    cli = lab(session)
    for line in ("wait", "recover a1 c1", "events", "progress"):
        cli.onecmd(line)
        out = capsys.readouterr().out
        assert out.strip(), line
    cli.onecmd("recover a1 c1")
    assert "already up" in capsys.readouterr().out
    assert session.changes == []                       # nothing was done to an up link
    cli.onecmd("fail a1 c1")
    assert "link a1-c1 down" in capsys.readouterr().out
    cli.onecmd("recover a1 c1")                        # set down here: brought back, however late netlink is
    assert "link a1-c1 up" in capsys.readouterr().out
    assert session.changes == [("a1", "c1", False), ("a1", "c1", True)]


def test_events_print_in_words_and_raw_under_v(lab, capsys):
    session = _session()
    session.events.add("standby_ready", tree="rat", failures=39, ms=2342.3)
    session.events.add("link_down", link="c1-a1", intf="a1-eth1")
    cli = lab(session)
    cli.onecmd("events")
    out = capsys.readouterr().out
    lines = out.strip().splitlines()
    assert len(lines) == 2, out
    assert "standby trees ready for 39 single failures (rat), computed in 2342.3 ms" in lines[0]
    assert "link c1-a1 went down" in lines[1]
    assert "=" not in out
    cli.onecmd("events -v")
    out = capsys.readouterr().out
    assert "failures=39 ms=2342.3" in out and "link=c1-a1 intf=a1-eth1" in out
    cli.onecmd("events 1")
    assert capsys.readouterr().out.strip() == lines[1].strip()


def test_an_event_of_a_kind_without_words_is_shown_raw():
    from agglab.event_words import in_words

    assert in_words("brand_new", {"x": 1}).split() == ["brand_new", "x=1"]


def test_an_outcome_said_during_wait_clears_the_progress_line(monkeypatch):
    """`wait` draws its progress line without a newline; an outcome said then starts by
    clearing it, so the two never run together on one line."""
    from agglab import lab

    class Tty(io.StringIO):
        def isatty(self):
            return True
    out = Tty()
    monkeypatch.setattr(lab.sys, "stdout", out)
    lab.AT_PROMPT.clear()
    out.write("12/40 blocks (30%), 5 blocks/s, ETA 5.6 s")
    lab.say("allreduce: exact")
    assert out.getvalue().split("\r\x1b[K")[-1] == "allreduce: exact\n"


def test_slots_explains_its_fields(lab, capsys):
    session = _session()
    regs = {n: [0] * 2 * wire.SLOTS for n in ("agg_count", "agg_bitmap", "agg_exp", "agg_final")}
    regs["agg_count"][3], regs["agg_bitmap"][3] = 2, 0b101
    session.job.read_registers = lambda sw, names: {n: regs[n] for n in names}
    session.job.live_switches = lambda: ["a1", "c1"]
    cli = lab(session)
    cli.onecmd("slots a1")
    out = capsys.readouterr().out
    assert "slot    3 ver 0: count 2, bitmap 0x5" in out, out
    for field in ("ver:", "count:", "bitmap:", "exp:", "final:"):
        assert field in out, (field, out)


def test_retransmissions_at_zero_loss_are_explained():
    from agglab.actions import summary

    run = {"exact": True, "elements": 1000, "dtype": "int32", "workers": 4, "seconds": 1.2, "epoch": 0,
           "retransmissions": 7, "loss": 0.0}
    assert "timer firing before its result came back" in summary(run)
    assert "timer firing" not in summary({**run, "loss": 0.05})          # loss explains them
    assert "timer firing" not in summary({**run, "retransmissions": 0})


@pytest.mark.parametrize("field", ["tree", "algorithm"])
def test_the_tree_of_an_event_is_worded_from_its_field_or_an_old_runs(field):
    """Events written before `algorithm` meant the scheme only name the tree algorithm
    `algorithm=` (trees_installed, standby_ready); `agglab show`/`replay` of such a run
    directory still word it."""
    from agglab.event_words import in_words

    assert in_words("standby_ready", {field: "rat", "failures": 3, "ms": 1.5}) == \
        "standby trees ready for 3 single failures (rat), computed in 1.5 ms"
    assert in_words("trees_installed", {"epoch": 2, "trees": 4, field: "packing"}) == \
        "trees installed: epoch 2, 4 packing tree(s)"
