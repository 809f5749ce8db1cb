"""Generated bad input, on the CLI's parser and on the lab's command parser: one line, never
a traceback. Fast and deterministic for CI: Hypothesis derandomized (the same
examples every run), no deadline.

The CLI: `agglab.cli.main` in-process, with argv built from the real parsers' option names
(read from `build_parser()`, so a new option is fuzzed without a change here) and values
mixing valid ones (each option's choices, small numbers) with garbage (text, nan, inf,
negative, huge, empty, option-like). Nothing under test is stubbed: a command that accepts
its input runs until the point where it would begin a network, the Session's first step
(ground/netlease.py's `refuse_if_busy`), which raises ReachedNetwork here instead. Every
other outcome must be exit 2 with exactly one line on stderr (or exit 0 for the commands
that only write files), and no traceback.

The lab: generated command lines through `LabCLI` (agglab/lab.py, on Mininet's CLI: the
lab's own parser and Actions) over a scratch network: the real k=4 fat-tree graph, its real
trees and RunSpec, and a stand-in for the processes (switch registers read as zeros, a link
or switch change recorded). Each line is invalid by construction (a wrong argument count, a
name the topology does not have, an option that does not exist or is fixed when the lab
opens, a value of the wrong type or range); the lab must answer it with one line and go on,
and never start an allreduce or change a link or switch.
"""

from __future__ import annotations

import argparse
import os
import threading
from types import SimpleNamespace

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from agglab.cli import build_parser, main

FUZZ = settings(max_examples=200, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


class ReachedNetwork(BaseException):
    """The command accepted its input and was about to build a network."""


@pytest.fixture
def no_network(monkeypatch, tmp_path):
    def refuse(*args, **kwargs):
        raise ReachedNetwork()

    monkeypatch.setattr("agglab.ground.netlease.refuse_if_busy", refuse)
    monkeypatch.chdir(tmp_path)          # export and draw write where they are told: here


# -- the CLI ----------------------------------------------------------------------------------
# Commands that check all their input before they do anything slow or outside the process.
COMMANDS = ("allreduce", "lab", "draw", "calibrate", "export")
GARBAGE = ("", "-", "--", "nan", "inf", "-inf", "-1", "0", "1e309", "0x10", "abc", "a1@0.5", "tree@2", "x-y@0.5",
           "é", "1,2", "0.5,x", "99999999999999999999", "../x", "/dev/null", "\x00", "s1@nan", "--workers", "3.5",
           "fattree", "bcube", "single", "spt", "x.yaml", "x.txt")


def _subparser(cmd: str) -> argparse.ArgumentParser:
    ap = build_parser()
    sub = next(a for a in ap._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices[cmd]


OPTIONS = {cmd: [a for a in _subparser(cmd)._actions if a.option_strings and not isinstance(a, argparse._HelpAction)]
           for cmd in COMMANDS}
POSITIONAL = {"draw": ["fattree", "single", "nosuch"], "export": ["p4app"]}


def _value(action: argparse.Action) -> st.SearchStrategy[list[str]]:
    if action.nargs == 0:                         # a flag
        return st.just([])
    numbers = st.one_of(st.integers(-5, 40).map(str), st.integers(65, 10 ** 25).map(str),
                        st.floats(allow_nan=True, allow_infinity=True).map(repr))
    valid = st.sampled_from(list(action.choices)) if action.choices else numbers
    return st.one_of(valid, numbers, st.sampled_from(GARBAGE), st.text(max_size=6)).map(lambda v: [v])


@st.composite
def argvs(draw) -> list[str]:
    cmd = draw(st.sampled_from(COMMANDS))
    argv = [cmd]
    if cmd == "draw":
        argv += [draw(st.sampled_from(POSITIONAL["draw"] + list(GARBAGE)))]
    if cmd == "export":
        argv += ["p4app", draw(st.sampled_from(["fattree", "single", *GARBAGE]))]
    for action in draw(st.lists(st.sampled_from(OPTIONS[cmd]), max_size=4)):
        argv += [draw(st.sampled_from(action.option_strings)), *draw(_value(action))]
    return argv


@FUZZ
@given(argv=argvs())
def test_the_cli_answers_any_argv_with_one_line_or_starts_its_work(argv, no_network, capsys):
    try:
        code = main(argv)
    except SystemExit as exc:                 # argparse's refusals
        code = exc.code
    except ReachedNetwork:
        code = None
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err, (argv, err)
    if code is None:                          # accepted: it was about to build the network
        return
    if code == 0 and argv[0] in ("draw", "export"):      # accepted: the files are written
        return
    assert code == 2, (argv, code, err)
    assert err.count("\n") == 1 and err.startswith("agglab"), (argv, err)


# Values wrong by construction, from what each option's help and docs/ promise (not from the
# code that checks them), with the text a refusal must name.
nonnumber = st.sampled_from(["abc", "", "1.2.3", "x1", "--", "é"])
BAD_PARTS = {
    "--workers": st.one_of(st.integers(-10 ** 6, 0), st.integers(1025, 10 ** 30)).map(str),
    "--elements": st.integers(-10 ** 6, 0).map(str),
    "--loss": st.one_of(st.floats(1.0001, 1e300), st.floats(-1e300, -1e-9), st.just(float("nan"))).map(repr),
    "--bw": st.one_of(st.floats(-1e300, 0.0), st.sampled_from([float("nan"), float("inf")])).map(repr),
    "--give-up": st.one_of(st.floats(-1e300, 0.0), st.sampled_from([float("nan"), float("inf")])).map(repr),
    "--window": st.one_of(st.integers(-10 ** 6, 0), st.integers(1025, 10 ** 30)).map(str),
    "--seed": st.one_of(st.integers(-10 ** 30, -1), st.integers(2 ** 32, 10 ** 30)).map(str),
    "--chaos": st.one_of(st.integers(-10 ** 30, -1), st.integers(2 ** 32, 10 ** 30)).map(str),
    "--k": st.integers(-10 ** 30, -1).map(str),
    "--density": st.one_of(st.floats(1.0001, 1e300), st.floats(-1e300, -1e-9), st.just(float("nan"))).map(repr),
    "--jobs": st.one_of(st.integers(-10 ** 6, 0), st.integers(10 ** 4, 10 ** 30)).map(str),
    "--zero-workers": st.integers(-10 ** 6, -1).map(str),
    "--fail": st.sampled_from(["garbage", "@", "a-b@", "a-b@x", "tree@nan", "tree@-1", "tree@1.5", "e1-a1"]),
    "--fail-switch": st.sampled_from(["@", "a1", "tree@2", "a1@nan", "a1@-0.5", "s1@"]),
    "--hang-switch": st.sampled_from(["@", "a1", "tree@2", "a1@nan", "a1@-0.5", ""]),
    "--job-loss": st.sampled_from(["abc", "0.1,x", ",", "nan,1", "2"]),
    "--web-port": st.one_of(st.integers(-10 ** 6, -1), st.integers(65536, 10 ** 30)).map(str),
    "--topology": st.sampled_from(["nosuch", "Fat Tree", "../x", "/nonexistent/dc.yaml", ""]),
    "--cluster": st.sampled_from(["/nonexistent/cluster.yaml", "/dev/null"]),
    "--keep": st.sampled_from(["/dev/null", "/etc/hostname"]),     # exists and is not an empty directory
    "--dtype": st.sampled_from(["int8", "INT32", "float", ""]), "--tree": st.sampled_from(["nosuch", "RAT", ""]),
    "--algorithm": st.sampled_from(["nosuch", "SwitchML", ""]), "--backend": st.sampled_from(["p4", "Soft", ""]),
}
NUMERIC_OPTIONS = ["--workers", "--elements", "--loss", "--bw", "--give-up", "--window", "--seed", "--chaos", "--k",
                   "--density", "--jobs", "--zero-workers", "--web-port"]
VALID_EXTRAS = [["--elements", "1000"], ["--seed", "3"], ["--loss", "0.1"], ["--dtype", "int32"], ["--give-up", "5"],
                ["--bw", "10"], ["--window", "8"], ["--json"], ["--progress"]]


@st.composite
def bad_argvs(draw) -> tuple[list[str], str]:
    """(argv with one certainly wrong part among valid ones, the option the refusal names)."""
    cmd = draw(st.sampled_from(["allreduce", "lab"]))
    option = draw(st.sampled_from(sorted(BAD_PARTS) + ["--no-such-option"]))
    if option == "--no-such-option":
        bad = [option]
    elif option in NUMERIC_OPTIONS and draw(st.booleans()):
        bad = [option, draw(nonnumber)]                      # not a number at all
    else:
        bad = [option, draw(BAD_PARTS[option])]
    extras = draw(st.lists(st.sampled_from([e for e in VALID_EXTRAS if e[0] != option and
                                            (cmd == "allreduce" or e[0] not in ("--json", "--progress"))]),
                           max_size=3, unique_by=lambda e: e[0]))
    at = draw(st.integers(0, len(extras)))
    parts = [*[p for e in extras[:at] for p in e], *bad, *[p for e in extras[at:] for p in e]]
    return [cmd, *parts], option


@FUZZ
@given(case=bad_argvs())
def test_the_cli_refuses_a_bad_option_value_in_one_line_naming_it(case, no_network, capsys):
    argv, option = case
    try:
        code = main(argv)
    except SystemExit as exc:
        code = exc.code
    except ReachedNetwork:
        pytest.fail(f"{argv}: accepted, and about to build a network")
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err, (argv, code, err)
    assert err.startswith(f"agglab {argv[0]}: ") or err.startswith("agglab: "), (argv, err)
    named = {"--topology": ("--topology", "topology"), "--cluster": ("cluster file",), "--keep": ("--keep",)}
    assert any(n in err for n in named.get(option, (option,))), (argv, err)


# -- the lab ----------------------------------------------------------------------------------
class ScratchSession:
    """What LabCLI and Actions read and call on a Session, over the real k=4 fat-tree graph,
    its real rat trees and RunSpec; the switch processes and links are stood in for, and
    every change asked of them is recorded (an invalid line must ask none)."""

    def __init__(self):
        from agglab.controller import topologies, trees
        from agglab.controller.topology import switches, workers
        from agglab.ground import wire
        from agglab.ground.runspec import RunSpec

        self.spec = RunSpec(topology="fattree", k=4, workers=8, tree="rat")
        self.g = topologies.for_run(self.spec)
        self.changes: list[tuple] = []
        ts = trees.compute("rat", self.g, workers(self.g))
        names = switches(self.g)
        regs = {n: [0] * (2 * wire.SLOTS) for n in ("agg_count", "agg_bitmap", "agg_exp", "agg_final")}
        state = SimpleNamespace(treeset=ts, tree="rat", algorithm="switchml", window=8, partitioned=None,
                                tree_of_slot=[0] * wire.SLOTS)
        self.job = SimpleNamespace(job=1, workers=workers(self.g), trees=lambda: ts, state=lambda: state,
                                   live_switches=lambda: names, read_registers=lambda sw, keys: regs,
                                   switch_stats=lambda: {sw: {"contributions": 0} for sw in names},
                                   reinstall=lambda tree, why: self.changes.append(("reinstall", tree)))
        self.jobs = [self.job]
        mininet = {n: SimpleNamespace(name=n, waiting=False) for n in self.g.nodes}
        self.net = SimpleNamespace(net=mininet, run=None, set_link=lambda a, b, up: self.changes.append(("link", a, b)))
        self.events = SimpleNamespace(lines=lambda n=None: [])
        self.cancelled = threading.Event()
        self.last_result, self.runs, self.quiet = None, 0, True

    def kill_switch(self, name):
        self.changes.append(("kill", name))

    def restart_switch(self, name):
        self.changes.append(("restart", name))

    def allreduce(self, **opts):
        self.changes.append(("allreduce", opts))
        return {}

    def cancel(self):
        self.cancelled.set()


WORDS = st.one_of(st.sampled_from(["e1", "a1", "c1", "h1", "s1", "x9", "e1-a1", "tree", "0", "-1", "abc", "é", "''",
                                   "--", "a1@0.5", "nan", "e99", "c1c1"]),
                  st.text(alphabet=st.characters(blacklist_categories=("Cc", "Cs", "Zs", "Zl", "Zp")), min_size=1,
                          max_size=5))
SESSION = ScratchSession()
SWITCHES = set(n for n, d in SESSION.g.nodes(data=True) if d["kind"] == "switch")
FIXED = ["--workers", "--topology", "--k", "--bw", "--backend", "--jobs", "--keep", "--cluster", "--hang-switch",
         "--chaos", "--bml-variant"]       # shape the network: fixed when the lab opens (agglab/lab.py's PER_RUN)
NUMERIC = ["--loss", "--density", "--window", "--seed", "--give-up", "--block-size", "--zero-workers"]
CHOICE = ["--dtype", "--tree", "--algorithm", "--pattern"]


@st.composite
def bad_lines(draw) -> str:
    """A lab command line that is wrong by construction (the kinds the module docstring lists)."""
    kind = draw(st.sampled_from(["link", "switch", "slots", "allreduce"]))
    words = draw(st.lists(WORDS, max_size=4))
    if kind == "link":
        if len(words) == 2 and SESSION.g.has_edge(*words):
            words.append("extra")                        # three words: still wrong
        return f"{draw(st.sampled_from(['fail', 'recover']))} {' '.join(words)}"
    if kind == "switch":
        if len(words) == 1 and words[0] in SWITCHES:
            words = [words[0] + "x"]                     # not a switch of the topology
        return f"{draw(st.sampled_from(['kill', 'restart']))} {' '.join(words)}"
    if kind == "slots":
        if 1 <= len(words) <= 2 and words[0] in SWITCHES and (len(words) == 1 or words[-1].isdecimal()):
            words = ["nosuch", *words]
        return "slots " + " ".join(words)
    # allreduce: one certainly bad part among random (maybe valid) ones
    bad = draw(st.sampled_from([
        [draw(st.sampled_from(FIXED)), "1"],                                      # fixed when the lab opens
        ["--no-such-option"],
        [draw(st.sampled_from(NUMERIC)), draw(st.sampled_from(["abc", "", "x1", "--"]))],   # not a number
        ["--loss", draw(st.sampled_from(["1.5", "-0.1", "nan"]))],                # not a probability
        [draw(st.sampled_from(CHOICE)), draw(st.sampled_from(["nosuch", "INT32", ""]))],    # not a choice
        ["--fail", draw(st.sampled_from(["garbage", "x9-y9@0.5", "e1-a1@2", "tree@nan"]))],
        ["--fail-switch", draw(st.sampled_from(["x9@0.5", "h1@0.5", "e1@1.5", "@"]))],
        [draw(st.sampled_from(["0", "-5", "abc", "1e3"]))],                       # ELEMENTS: not a positive int
    ]))
    extra = draw(st.lists(st.sampled_from([["--loss", "0.1"], ["--tree", "spt"], ["--seed", "3"], ["--dtype", "int32"],
                                           ["5000"]]), max_size=2))
    parts = [p for e in extra for p in e]
    if bad[0].lstrip("-").isdigit() or bad[0] in ("abc", "1e3"):   # the bare ELEMENTS goes first
        parts = [p for p in parts if p != "5000"]
        return "allreduce " + " ".join([*bad, *parts])
    return "allreduce " + " ".join([p for p in parts if p != "5000"] + bad)


@FUZZ
@given(line=bad_lines())
def test_the_lab_answers_a_bad_line_with_one_line_and_goes_on(line, tmp_path, capfd):
    from agglab.actions import Actions
    from agglab.lab import LabCLI

    script = tmp_path / "commands"
    script.write_text(line + "\n")
    actions = Actions(SESSION, say=print)
    before = list(SESSION.changes)
    with open(os.devnull) as quiet_stdin:
        LabCLI(SESSION, [], actions, stdin=quiet_stdin, script=str(script))   # returns at the script's end
    out, err = capfd.readouterr()
    lines = [x for x in (out + err).splitlines() if x.strip() and not x.startswith("*** Starting CLI")]
    assert len(lines) == 1 and "Traceback" not in out + err, (line, out, err)
    assert not lines[0].startswith("allreduce started"), (line, lines)
    assert SESSION.changes == before and actions.thread is None, (line, SESSION.changes)
