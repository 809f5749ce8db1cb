"""The command line builds the one RunSpec from its options, and bad input is one line, exit 2.

These run without root and build no network: the options are checked (RunSpec.validate,
the topology graph, the named --fail links) before anything is started.
"""

from __future__ import annotations

import sys
import types
from dataclasses import fields

import pytest

from agglab.cli import build_parser, main, spec_from_args
from ground.runspec import RunSpec

# Every RunSpec field is an option, except what only tests set.
NOT_OPTIONS = {"length_override"}

# One non-default value per field, spelled as on the command line.
GIVEN = {"workers": ("7", 7), "elements": ("123", 123), "dtype": ("float32", "float32"), "loss": ("0.25", 0.25),
         "backend": ("bmv2", "bmv2"), "window": ("16", 16), "seed": ("9", 9), "give_up": ("3.5", 3.5),
         "job": None, "bw": ("50", 50.0), "topology": ("fattree", "fattree"), "k": ("6", 6),
         "tree": ("packing", "packing"), "bml_variant": ("host", "host"),
         "algorithm": ("omnireduce", "omnireduce"), "density": ("0.5", 0.5), "pattern": ("overlap", "overlap"),
         "block_size": ("512", 512), "zero_workers": ("2", 2), "fail": ("tree@0.5", ["tree@0.5"]),
         "fail_switch": ("a1@0.5", ["a1@0.5"])}


def test_defaults_are_runspec_defaults():
    assert spec_from_args(build_parser().parse_args(["allreduce"])) == RunSpec()


@pytest.mark.parametrize("cmd", ["allreduce", "lab"])
def test_every_option_sets_its_field(cmd):
    covered = {f.name for f in fields(RunSpec)} - NOT_OPTIONS - {k for k, v in GIVEN.items() if v is None}
    assert covered == {k for k, v in GIVEN.items() if v is not None}, "GIVEN lacks a RunSpec field"
    argv = [cmd]
    for name in sorted(covered):
        argv += ["--" + name.replace("_", "-"), GIVEN[name][0]]
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
])
def test_bad_input_is_one_line_and_exit_2(cmd, argv, message, capsys, monkeypatch):
    def must_not_run(*args, **kwargs):
        raise AssertionError("bad input reached the network")

    monkeypatch.setattr("emulation.session.run_spec", must_not_run)
    monkeypatch.setitem(sys.modules, "agglab.lab", types.SimpleNamespace(run_lab=must_not_run))
    assert main([cmd, *argv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"agglab {cmd}: ") and message in err, err


def test_lab_allreduce_line_takes_the_per_run_options(monkeypatch):
    """The lab's `allreduce` command parses the CLI's options; those that shape the network
    are refused with one line (agglab.lab imports Mininet's CLI: a stand-in is enough here)."""
    cli_module = types.ModuleType("mininet.cli")
    cli_module.CLI = type("CLI", (), {})
    monkeypatch.setitem(sys.modules, "mininet", types.ModuleType("mininet"))
    monkeypatch.setitem(sys.modules, "mininet.cli", cli_module)
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
