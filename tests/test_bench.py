"""agglab/bench/: the figures it writes carry their target, link rate, scale and link-boundness."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from agglab import bench
from agglab.bench import cli, twin
from agglab.emulation.fidelity import dense_link_seconds
from agglab.ground import wire
from agglab.ground.paths import REPO


def test_analytic_wire_time_of_one_million_int32_at_5_mbps():
    # ceil(1M / K) frames of 14 + 20 + 8 + 16 + 4K bytes (314 at K=64) each way, at 5 Mb/s
    k = wire.K
    frame = 14 + 20 + 8 + 16 + 4 * k
    assert dense_link_seconds(1_000_000, 5.0) == pytest.approx(-(-1_000_000 // k) * frame * 8 / 5e6)
    assert dense_link_seconds(k + 1, 1.0) == pytest.approx(2 * frame * 8 / 1e6)   # a partial packet counts


def test_a_run_writes_json_and_compares_with_the_previous(tmp_path):
    first, second = tmp_path / "a.json", tmp_path / "b.json"
    run = [sys.executable, "-m", "agglab.bench", "--only", "pipeline"]
    subprocess.run(run + ["--out", str(first)], cwd=REPO, check=True, capture_output=True, timeout=300)
    report = json.loads(first.read_text())
    assert {"time", "cpus", "load_average", "commit"} <= set(report)
    names = [f["name"] for f in report["figures"]]
    assert names == ["pipeline dense", "pipeline sparse (density 0.2)"]
    for f in report["figures"]:
        assert f["value"] > 0 and f["unit"] == "packets/s" and f["scale"] and f["link_bound"] is False
    out = subprocess.run(run + ["--out", str(second), "--compare", str(first)], cwd=REPO, check=True,
                         capture_output=True, text=True, timeout=300).stdout
    assert out.count(" was ") == 2 and "written to" in out


@pytest.mark.parametrize("args", [["--only", "nothing"], ["--rates", "5,x"], ["--wide-rates", "0"],
                                  ["--compare", "/nonexistent.json"], ["--limit-seconds", "0"]])
def test_bad_arguments_exit_2_with_one_line(args):
    res = subprocess.run([sys.executable, "-m", "agglab.bench", *args], cwd=REPO, capture_output=True,
                         text=True, timeout=60)
    assert res.returncode == 2
    assert len(res.stderr.strip().splitlines()) == 1 and "agglab bench" in res.stderr


def test_a_section_that_raises_is_failed_with_the_exceptions_text(tmp_path, monkeypatch):
    """A section that broke is a failure, not a skip (exit 1); the others still run; the reason
    is never empty: an exception with no text of its own is named with where it was raised and
    what it came from."""
    def bare(_a):
        try:
            {}["slots"]
        except KeyError:
            raise TimeoutError

    def worded(_a):
        raise RuntimeError("the run failed: w0 timed out")

    out = tmp_path / "b.json"
    monkeypatch.setattr(twin, "bench_pipeline", bare)
    monkeypatch.setattr(twin, "bench_daemon", worded)
    monkeypatch.setattr(cli.os, "geteuid", lambda: 1000)         # daemon needs root: skipped before it runs
    assert cli.main(["--only", "pipeline,daemon", "--out", str(out)]) == 1
    report = json.loads(out.read_text())
    assert report["skipped"] == [{"section": "daemon", "why": "needs root"}]
    (pipeline,) = report["failed"]
    assert pipeline["section"] == "pipeline"
    assert pipeline["why"].startswith("TimeoutError raised at tests/test_bench.py:"), pipeline["why"]
    assert pipeline["why"].endswith("in bare: raise TimeoutError from KeyError: 'slots'"), pipeline["why"]
    monkeypatch.setattr(cli.os, "geteuid", lambda: 0)
    monkeypatch.setattr(cli.netlease, "acquire", lambda *_a, **_k: None)   # the machine alone: not here
    monkeypatch.setattr(cli.netlease, "release", lambda: None)
    assert cli.main(["--only", "daemon", "--out", str(out)]) == 1
    report = json.loads(out.read_text())
    assert report["skipped"] == [] and report["failed"] == [
        {"section": "daemon", "why": "RuntimeError: the run failed: w0 timed out"}]


def test_a_section_without_its_tool_is_skipped_not_failed(tmp_path, monkeypatch):
    """BMv2 absent: the bmv2 sections are skipped with exactly that reason, and the run passes."""
    from agglab.bench import bmv2

    out = tmp_path / "b.json"
    monkeypatch.setattr(cli.os, "geteuid", lambda: 0)
    monkeypatch.setattr(cli.netlease, "acquire", lambda *_a, **_k: None)   # the machine alone: not here
    monkeypatch.setattr(cli.netlease, "release", lambda: None)
    monkeypatch.setattr(bmv2, "installed_tool", lambda _name: None)
    monkeypatch.setattr(bmv2, "find_bmv2_tool", lambda _name: None)
    monkeypatch.setattr("agglab.controller.bmv2_tools.find_bmv2_tool", lambda _name: None)     # recovery's import
    assert cli.main(["--only", "bmv2,bmv2-reroute", "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["failed"] == [] and report["figures"] == []
    assert report["skipped"] == [{"section": "bmv2", "why": bench.NO_BMV2},
                                 {"section": "bmv2-reroute", "why": bench.NO_BMV2}]


def test_ctrl_c_in_a_section_ends_the_run_with_one_line(tmp_path, monkeypatch, capsys):
    """What the section started it removes on its way out (its `with` blocks); the run says so
    in one line and exits 130, with no traceback and no half-written JSON."""
    def interrupted(_a):
        raise KeyboardInterrupt

    monkeypatch.setattr(twin, "bench_pipeline", interrupted)
    out = tmp_path / "b.json"
    assert cli.main(["--only", "pipeline,trees", "--out", str(out)]) == 130
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["agglab bench: interrupted during pipeline; nothing written"] and not out.exists()


def test_a_wrapped_socket_error_is_named():
    """Thrift's transport error reads "unexpected exception"; what happened is its `inner`."""
    from thrift.transport.TTransport import TTransportException

    exc = TTransportException(message="unexpected exception", inner=ConnectionResetError(104, "Connection reset by peer"))
    assert cli.failure_text(exc) == ("TTransportException: unexpected exception from "
                                     "ConnectionResetError: [Errno 104] Connection reset by peer")


@pytest.mark.root
@pytest.mark.mininet
def test_the_wide_section_runs_the_256_value_variant(tmp_path):
    out = tmp_path / "wide.json"
    subprocess.run([sys.executable, "-m", "agglab.bench", "--only", "wide", "--elements", "25600",
                    "--wide-rates", "50", "--out", str(out)], cwd=REPO, check=True, capture_output=True,
                   timeout=240)
    report = json.loads(out.read_text())
    assert report["skipped"] == report["failed"] == [] and report["values_per_packet"] == wire.K  # the parent's variant
    (f,) = report["figures"]
    assert f["name"] == "8 x 25,600 int32 at 50 Mb/s, K=256" and f["section"] == "wide"
    assert f["target"] is None and f["exact"] is True and "256 per packet" in f["scale"]
    # 100 frames of 14 + 20 + 8 + 16 + 256 * 4 = 1082 bytes each way at 50 Mb/s
    assert f["analytic_s"] == pytest.approx(100 * 1082 * 8 / 50e6, abs=1e-3)


# -- every section, smoke-run at a tiny size ------------------------------------------------
FIGURE_KEYS = {"name", "value", "unit", "target", "met", "link_mbps", "scale", "link_bound", "section",
               "cpu_reference_s"}
TINY = ["--elements", "12800", "--rates", "20", "--wide-rates", "50", "--reroute-elements", "20000",
        "--switchfail-kills", "1", "--daemon-seconds", "1", "--bmv2-reroute-runs", "1",
        "--policer-frames", "20000", "--policer-runs", "1", "--chaos-seeds", "2", "--chaos-elements", "20000",
        "--limit-seconds", "1", "--limit-elements", "32768"]


def _bench(tmp_path, sections: list[str], timeout: float) -> dict:
    out = tmp_path / "bench.json"
    res = subprocess.run([sys.executable, "-m", "agglab.bench", "--only", ",".join(sections), *TINY,
                          "--out", str(out)], cwd=REPO, capture_output=True, text=True, timeout=timeout)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    report = json.loads(out.read_text())
    assert {"time", "host", "cpus", "load_average", "load_average_end", "commit", "values_per_packet",
            "figures", "skipped", "failed"} <= set(report)
    return report


def _check_sections(report: dict, sections: list[str], may_skip: dict[str, str]) -> None:
    """No section failed; each gave figures with every key, or was skipped for exactly the
    reason allowed here."""
    assert report["failed"] == [], report["failed"]
    skipped = {s["section"]: s["why"] for s in report["skipped"]}
    for section, why in skipped.items():
        assert section in sections and may_skip.get(section) == why, (section, why)
    for section in sections:
        figures = [f for f in report["figures"] if f["section"] == section]
        if section in skipped:
            continue
        assert figures, f"section {section} gave no figure"
        for f in figures:
            assert FIGURE_KEYS <= set(f), (section, sorted(FIGURE_KEYS - set(f)))
            assert isinstance(f["value"], (int, float)) and f["unit"], f
            assert f["met"] is None or (f["target"] and isinstance(f["met"], bool)), f


def test_sections_without_root_run_tiny(tmp_path):
    sections = ["pipeline", "trees"]
    report = _bench(tmp_path, sections, timeout=300)
    _check_sections(report, sections, {})
    trees = [f["name"] for f in report["figures"] if f["section"] == "trees"]
    assert any("fat-tree k=16" in n or "k=16" in n for n in trees), trees


@pytest.mark.root
@pytest.mark.mininet
@pytest.mark.slow
@pytest.mark.net_timeout(1500)
def test_every_network_section_runs_tiny(tmp_path):
    """wire, wide, reroute, switchfail, build, sparse, daemon, and the BMv2 ones (skipped with
    their reason where BMv2 is absent), each at a size that takes seconds."""
    from agglab.controller.bmv2_tools import find_bmv2_tool

    sections = ["daemon", "wire", "wide", "reroute", "switchfail", "build", "sparse", "bmv2", "bmv2-reroute"]
    report = _bench(tmp_path, sections, timeout=1400)
    no_bmv2 = not (find_bmv2_tool("simple_switch") and find_bmv2_tool("p4c"))
    _check_sections(report, sections, {"bmv2": bench.NO_BMV2, "bmv2-reroute": bench.NO_BMV2} if no_bmv2 else {})
    (wire_run,) = [f for f in report["figures"] if f["section"] == "wire"]
    assert wire_run["name"].startswith("8 x 12,800 int32 at 20 Mb/s") and wire_run["exact"] is True
    reroutes = [f for f in report["figures"] if f["section"] == "reroute" and f["name"].startswith("reroute ")
                and "median" not in f["name"]]
    assert len(reroutes) == 6 and all(f["exact"] for f in reroutes), reroutes


@pytest.mark.root
@pytest.mark.mininet
@pytest.mark.slow
@pytest.mark.net_timeout(900)
def test_the_policer_and_chaos_sections_run_tiny(tmp_path):
    """policer (one run each way) and chaos (two seeds): every figure well-formed, the runs exact."""
    report = _bench(tmp_path, ["policer", "chaos"], timeout=800)
    _check_sections(report, ["policer", "chaos"], {})
    policed = [f for f in report["figures"] if f["section"] == "policer"]
    assert len(policed) == 2 and all(f["exact"] and f["rejects_match"] for f in policed), policed
    assert policed[0]["policed"] > 0 and policed[1]["policed"] == 0
    (seeds,) = [f for f in report["figures"] if f["name"].startswith("chaos seeds ending")]
    assert sum(seeds["outcomes"].values()) == 2


@pytest.mark.root
@pytest.mark.mininet
@pytest.mark.net_timeout(600)
def test_the_limit_section_runs_tiny(tmp_path):
    """The kernel (a bridge), the software switch and an agent through one veth + htb chain, at
    both rates: CPU per frame that is positive and made of the parts it names, each path's
    ratio to the kernel's at its rate, an agent's receive batches of one result at the low rate
    and of more at the high rate; and nothing left behind (the leftovers check after every
    network test). Which path costs more is the bench's finding on a quiet machine, not
    behaviour a test can hold: beside two busy loops the bridge's low-rate frame once cost
    23.8 µs and the switch's 17.9 (a contended machine's wake-ups are dearer for everyone)."""
    report = _bench(tmp_path, ["limit"], timeout=540)
    _check_sections(report, ["limit"], {})
    figs = {(f["path"], f["rate"]): f for f in report["figures"] if f["section"] == "limit"}
    assert set(figs) == {(p, r) for p in ("kernel", "switch", "agent") for r in ("high", "low")}
    for (path, rate), f in figs.items():
        kernel = figs["kernel", rate]["value"]
        assert f["value"] > 0 and f["unit"] == "µs/frame" and f["frames"] > 0, f
        assert f["ratio_to_kernel"] == pytest.approx(f["value"] / kernel, rel=0.01, abs=0.002), f
        parts = f["cpu_us_per_frame_parts"]
        assert all(v > 0 for v in parts.values()) and sum(parts.values()) == pytest.approx(f["value"], rel=0.01), f
        assert f"{f['ratio_to_kernel']:.1f}x the kernel's" in f["detail"]
    for rate in ("high", "low"):
        assert set(figs["switch", rate]["cpu_us_per_frame_parts"]) == {"switch process", "NAPI thread"}
    assert figs["agent", "low"]["results_per_batch"] <= 1.5 < figs["agent", "high"]["results_per_batch"]
