"""`agglab train` without a network: the pure PACE model's JSON, and one clear line with
exit 2 for bad input."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from agglab.ground.paths import REPO


def agglab(*args, tmp_path):
    return subprocess.run([sys.executable, "-m", "agglab", "train", *args, "--out", str(tmp_path)],
                          capture_output=True, text=True, cwd=REPO, timeout=120)


def test_profile_only_pure_model_json(tmp_path):
    out = agglab("--model", "resnet50", "--profile-only", "--no-network", "--scheduler", "pace",
                 "--workers", "8", "--json", tmp_path=tmp_path)
    assert out.returncode == 0, out.stderr
    r = json.loads(out.stdout)
    assert r["ok"] and r["scheduler"] == "pace" and r["scale"] is None
    assert r["iteration_ms"] == r["model_iteration_ms"]["pace"] >= r["compute_ms"]
    assert json.loads(open(r["trace"]).read())["traceEvents"]


@pytest.mark.parametrize("args, message", [
    (["--model", "alexnet", "--profile-only", "--no-network"], "no profile 'alexnet'"),
    (["--model", "resnet50", "--profile-only", "--no-network", "--partition-mb", "0"], "--partition-mb must be positive"),
    (["--model", "resnet50", "--profile-only", "--no-network", "--algorithm", "nccl"], "--algorithm must be one of"),
    (["--pcap"], "--pcap writes per-port pcaps into the kept run directory: give --keep DIR too"),
    (["--topology", "single", "--fail", "tree@0.5"], "--fail tree@0.5: nothing to reroute around"),
    (["--topology", "fattree", "--k", "5"], "k must be an even number"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, args, message):
    out = agglab(*args, tmp_path=tmp_path)
    assert out.returncode == 2
    assert message in out.stderr and len(out.stderr.strip().splitlines()) == 1, out.stderr


def test_human_output_labels_packet_loss_and_formats_per_scheduler_times(capsys):
    """Packet loss is not confused with training loss, and no raw dict reaches the console."""
    from agglab.train_cmd import _print_human

    _print_human({"ok": True, "workers": 4, "algorithm": "switchml", "dtype": "int32", "topk": 1.0, "steps": 120,
                  "seconds": 4.8, "loss": 0.05, "retransmissions": 12, "final_accuracy": 0.9556,
                  "single_process_accuracy": 0.9556, "max_abs_param_diff": 0.0, "plot": "results/train/train.png"})
    out = capsys.readouterr().out
    assert "packet loss 5% per link direction" in out and "loss 0.05" not in out
    _print_human({"ok": True, "profile_only": True, "profile": "resnet50", "workers": 8, "algorithm": "switchml",
                  "link_gbps": 10.0, "emulated": False, "compute_ms": 66.7,
                  "iteration_ms": {"fifo": 126.656, "pace": 105.14}, "model_iteration_ms": {"fifo": 107.0, "pace": 83.6},
                  "speedup": 1.2, "model_speedup": 1.28, "timeline": "t.png", "trace": "t.json"})
    out = capsys.readouterr().out
    assert "iteration time: FIFO 126.7 ms, PACE 105.1 ms (pure model: FIFO 107.0 ms, PACE 83.6 ms)" in out
    assert "{" not in out, out


def test_help_shows_examples_that_parse_and_no_stray_words(capsys):
    """`agglab train --help` ends with examples, each a command the parser accepts; the scheme
    list reads as one sentence per scheme (ATP's dtype once was a stray "int32;")."""
    import shlex

    from agglab.cli import build_parser
    from agglab.train_cmd import EXAMPLES

    with pytest.raises(SystemExit, match="0"):
        build_parser().parse_args(["train", "--help"])
    text = capsys.readouterr().out
    assert "examples:" in text and "; int32;" not in text.replace("\n", " ")
    assert "(ATP), int32 only;" in " ".join(text.split())
    examples = [line.split("#")[0] for line in EXAMPLES.splitlines()[1:] if line.strip()]
    assert len(examples) >= 3
    for line in examples:
        args = shlex.split(line)
        args = args[args.index("agglab") + 1:]
        assert build_parser().parse_args(args).cmd == "train", line
