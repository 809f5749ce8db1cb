"""The per-test time limit fails a hung network test with the run's logs attached."""

from __future__ import annotations

from pathlib import Path

pytest_plugins = ["pytester"]

CONFTEST = Path(__file__).with_name("conftest.py")


def test_a_hung_network_test_fails_with_the_switch_logs(pytester, tmp_path, monkeypatch):
    run_root = tmp_path / "runs"
    (run_root / "run-x").mkdir(parents=True)
    (run_root / "run-x" / "s1.log").write_text("switch s1: waiting for packets\n")
    monkeypatch.setenv("AGGLAB_RUN_ROOT", str(run_root))
    pytester.makeconftest(CONFTEST.read_text())
    pytester.makeini("[pytest]\nmarkers =\n  root: x\n  mininet: x\n  bmv2: x\n  net_timeout(s): x\n")
    pytester.makepyfile(test_hang="""
        import time, pytest

        @pytest.mark.net_timeout(1)
        def test_hangs():
            try:
                time.sleep(30)
            finally:
                open("cleaned", "w").close()     # its own clean-up still runs
    """)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*TestTimeout*ran over 1 s*", "*s1.log*", "*switch s1: waiting for packets*"])
    assert (pytester.path / "cleaned").exists()
