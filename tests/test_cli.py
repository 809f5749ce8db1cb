"""The command line builds the one RunSpec from its options, and bad input is one line, exit 2.

These run without root and build no network: the options are checked (RunSpec.validate,
the topology graph, the named --fail links) before anything is started.
"""

from __future__ import annotations

import sys
import types
from dataclasses import fields

import pytest

from agglab.cli import build_parser, main
from agglab.run_options import spec_from_args
from agglab.ground.runspec import RunSpec

# Every RunSpec field is an option, except what only tests set.
NOT_OPTIONS = {"length_override"}

# One non-default value per field, spelled as on the command line.
GIVEN = {"workers": ("7", 7), "elements": ("123", 123), "dtype": ("float32", "float32"), "loss": ("0.25", 0.25),
         "backend": ("bmv2", "bmv2"), "window": ("16", 16), "seed": ("9", 9), "give_up": ("3.5", 3.5),
         "job": None, "bw": ("50", 50.0), "topology": ("fattree", "fattree"), "k": ("6", 6),
         "tree": ("packing", "packing"), "bml_variant": ("host", "host"),
         "algorithm": ("omnireduce", "omnireduce"), "density": ("0.5", 0.5), "pattern": ("overlap", "overlap"),
         "block_size": ("512", 512), "zero_workers": ("2", 2), "fail": ("tree@0.5", ["tree@0.5"]),
         "fail_switch": ("a1@0.5", ["a1@0.5"]), "hang_switch": ("a2@0.5", ["a2@0.5"]),
         "jobs": ("3", 3), "job_loss": ("0.1,0,0.2", [0.1, 0.0, 0.2]), "placement": ("packed", "packed"),
         "ps_layout": ("central", "central"), "atp_multicast": (None, True), "atp_ps": ("separate", "separate"),
         "atp_pool_slots": ("64", 64), "iterations": ("5", 5), "compute_ms": ("2.5", 2.5),
         "compute_profile": ("resnet50", "resnet50"), "job_offsets": ("0,0.5,1", [0.0, 0.5, 1.0]), "tenant": None,
         "keep": ("kept-run", "kept-run"), "pcap": (None, True),      # None: a flag without a value
         "cluster": ("cluster.yaml", "cluster.yaml"), "chaos": ("7", 7), "tcp_cc": ("reno", "reno")}


def test_defaults_are_runspec_defaults():
    assert spec_from_args(build_parser().parse_args(["allreduce"])) == RunSpec()


@pytest.mark.parametrize("cmd", ["allreduce", "lab"])
def test_every_option_sets_its_field(cmd):
    covered = {f.name for f in fields(RunSpec)} - NOT_OPTIONS - {k for k, v in GIVEN.items() if v is None}
    assert covered == {k for k, v in GIVEN.items() if v is not None}, "GIVEN lacks a RunSpec field"
    argv = [cmd]
    for name in sorted(covered):
        argv += ["--" + name.replace("_", "-")] + ([GIVEN[name][0]] if GIVEN[name][0] is not None else [])
    spec = spec_from_args(build_parser().parse_args(argv))
    for name in covered:
        assert getattr(spec, name) == GIVEN[name][1], name


def test_lab_has_its_own_defaults():
    spec = spec_from_args(build_parser().parse_args(["lab"]))
    assert (spec.topology, spec.workers, spec.tree) == ("fattree", 8, "rat")


@pytest.mark.parametrize("cmd", ["allreduce", "lab"])
@pytest.mark.parametrize("argv,message", [
    (["--workers", "0"], "--workers must be within 1..1024, got 0"),
    (["--topology", "nope.yaml"], "cannot read topology file"),
    (["--topology", "fattree", "--fail", "x1-y1@0.5"], "no link x1-y1"),
    (["--topology", "fattree", "--fail", "x1@0.5"], "expected A-B@FRACTION"),
    (["--topology", "fattree", "--fail-switch", "z9@0.5"], "no switch 'z9'"),
    (["--topology", "fattree", "--fail-switch", "h1@0.5"], "no switch 'h1'"),
    (["--topology", "fattree", "--fail-switch", "a1@1.5"], "within 0..1"),
    (["--topology", "single", "--fail-switch", "tree@0.5"], "every switch of this topology"),
    (["--topology", "single", "--tree", "bml"], "--tree bml goes with --topology bcube"),
    (["--topology", "fattree", "--k", "5"], "k must be an even number"),
    (["--topology", "bcube", "--tree", "bml", "--workers", "3"], "BML needs every BCube server as a worker"),
    (["--jobs", "2", "--window", "600"], "each job owns 512 slots"),
    (["--jobs", "2", "--job-loss", "0.1"], "one probability per job (2)"),
    (["--topology", "single", "--jobs", "2", "--workers", "20"],
     "switch s1 would aggregate 40 workers (--workers x --jobs = 40), but one switch aggregates at most 32"),
    (["--topology", "fattree", "--jobs", "5", "--workers", "4"], "workers must be between 1 and 16"),
    (["--pcap"], "--pcap writes per-port pcaps into the kept run directory: give --keep DIR too"),
    (["--cluster", "/nonexistent/cluster.yaml"], "cluster file /nonexistent/cluster.yaml: No such file or directory"),
    (["--topology", "single", "--fail", "tree@0.5"],
     "--fail tree@0.5: nothing to reroute around on this topology (it has no link between switches)"),
    (["--topology", "single", "--workers", "33"], "switch s1 would aggregate 33 workers, but one switch "
     "aggregates at most 32 workers (its contribution bitmap, AGG_MAX_WORKERS)"),
    (["--topology", "single", "--workers", "64"], "switch s1 would aggregate 64 workers"),
    (["--topology", "fattree", "--k", "12", "--workers", "300"],
     "at most 256 workers per job aggregate in the network"),
])
def test_bad_input_is_one_line_and_exit_2(cmd, argv, message, capsys, monkeypatch):
    def must_not_run(*args, **kwargs):
        raise AssertionError("bad input reached the network")

    monkeypatch.setattr("agglab.emulation.session.run_spec", must_not_run)
    monkeypatch.setitem(sys.modules, "agglab.lab", types.SimpleNamespace(run_lab=must_not_run))
    assert main([cmd, *argv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"agglab {cmd}: ") and message in err, err


def test_lab_allreduce_line_takes_the_per_run_options(monkeypatch):
    """The lab's `allreduce` command parses the CLI's options; those that shape the network
    are refused with one line (agglab.lab imports Mininet's CLI, log and util: stand-ins are enough here)."""
    stand_ins = {"mininet.cli": {"CLI": type("CLI", (), {})}, "mininet.log": {"setLogLevel": print},
                 "mininet.util": {"quietRun": print}}
    monkeypatch.setitem(sys.modules, "mininet", types.ModuleType("mininet"))
    for name, attrs in stand_ins.items():
        monkeypatch.setitem(sys.modules, name, types.SimpleNamespace(**attrs))
    saved = sys.modules.pop("agglab.lab", None)
    try:
        from agglab.lab import _parse_allreduce
    finally:                                    # never leave the stand-in's lab behind
        sys.modules.pop("agglab.lab", None)
        if saved is not None:
            sys.modules["agglab.lab"] = saved
    assert _parse_allreduce(["30000", "--tree", "spt", "--loss", "0.1"]) == {"elements": 30000, "tree": "spt",
                                                                           "loss": 0.1}
    assert _parse_allreduce(["--fail", "tree@0.5", "--algorithm", "omnireduce"]) == {
        "fail": ["tree@0.5"], "algorithm": "omnireduce"}
    for bad, message in [(["--workers", "3"], "--workers is fixed when the lab opens"),
                         (["--dtype", "int8"], "invalid choice"), (["--bogus"], "unrecognized")]:
        with pytest.raises(ValueError, match=message):
            _parse_allreduce(bad)


@pytest.mark.parametrize("cmd", ["allreduce", "lab"])
def test_keep_never_writes_over_a_used_directory(cmd, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr("agglab.emulation.session.run_spec", lambda *a, **k: pytest.fail("reached the network"))
    (tmp_path / "old-run").mkdir()
    (tmp_path / "old-run" / "s1.log").write_text("a previous run")
    assert main([cmd, "--keep", str(tmp_path / "old-run")]) == 2
    err = capsys.readouterr().err
    assert err == f"agglab {cmd}: --keep {tmp_path / 'old-run'}: exists and is not an empty directory " \
                  "(a kept run is never written over)\n"


# A YAML data centre of two racks under one spine: no second path, 3 workers per rack.
TWO_RACKS = """\
nodes:
  switches: [t1, t2, sp1]
  hosts: [h1, h2, h3, h4, h5, h6]
links:
  - [h1, t1]
  - [h2, t1]
  - [h3, t1]
  - [h4, t2]
  - [h5, t2]
  - [h6, t2]
  - [t1, sp1]
  - [t2, sp1]
"""
WIDE = "nodes:\n  switches: [t1]\n  hosts: [" + ", ".join(f"h{i}" for i in range(1, 35)) + "]\nlinks:\n" + \
    "".join(f"  - [h{i}, t1]\n" for i in range(1, 35))
RANKED = "nodes:\n  switches: [s1]\n  hosts: [{name: a1, rank: 0}, {name: a2, rank: 1}, a3]\n" \
         "links:\n  - [a1, s1]\n  - [a2, s1]\n  - [a3, s1]\n"


@pytest.mark.parametrize("cmd", ["allreduce", "lab"])
@pytest.mark.parametrize("text,argv,message", [
    (TWO_RACKS.replace("  - [t2, sp1]", "  - [t2, sp1, fast]"), ["--workers", "6"],
     "dc.yaml:12: bw of link t2-sp1 must be a positive number"),
    (TWO_RACKS, ["--workers", "7"], "has 6 hosts, fewer than --workers 7"),
    (TWO_RACKS, ["--workers", "6", "--fail", "tree@0.5"], "--fail tree@0.5: nothing to reroute around on this "
     "topology (every link between its switches is the only path to some worker)"),
    (TWO_RACKS, ["--workers", "6", "--fail", "t1-sp2@0.5"], "no link t1-sp2"),
    (WIDE, ["--workers", "34"], "switch t1 would aggregate 34 children on tree 0, but its contribution bitmap "
     "holds 32 (AGG_MAX_WORKERS)"),
    (RANKED, ["--workers", "3"], "ranks 2 hosts as workers: give --workers 2"),
])
def test_yaml_topology_errors_are_one_line_and_exit_2(cmd, text, argv, message, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr("agglab.emulation.session.run_spec", lambda *a, **k: pytest.fail("reached the network"))
    monkeypatch.setitem(sys.modules, "agglab.lab", types.SimpleNamespace(run_lab=lambda *a, **k: pytest.fail("lab")))
    path = tmp_path / "dc.yaml"
    path.write_text(text)
    assert main([cmd, "--topology", str(path), "--tree", "spt", *argv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"agglab {cmd}: ") and message in err, err


def test_yaml_topology_without_ranks_takes_the_first_workers(tmp_path):
    """--workers below the file's host count: the first hosts in name order are the ranks
    (as the built-in topologies place fewer workers than hosts), and the tree spans them."""
    from agglab.controller.topology import workers
    from agglab.emulation.session import graph_for

    path = tmp_path / "dc.yaml"
    path.write_text(TWO_RACKS)
    g = graph_for(spec_from_args(build_parser().parse_args(["lab", "--topology", str(path), "--workers", "4",
                                                            "--tree", "spt"])))
    assert workers(g) == ["h1", "h2", "h3", "h4"]
    assert [g.nodes[h].get("rank") for h in ("h5", "h6")] == [None, None]
