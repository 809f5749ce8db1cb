"""Run the test suite (or any command) on a fresh clone beside busy loops, and say how it went.

Why: a lab machine is shared. A liveness probe that fences a live switch when the machine is
busy, or workers that give up on a slow start, are correctness bugs that a quiet CI run never
shows (three such failures were found this way). This is the pass that finds them, made one
command so that anyone can repeat it and every figure it gives carries its load:

- a fresh `git clone` of HEAD (the working tree's uncommitted changes are not in it), so what
  runs is what would land; `../shared` is beside it when the checkout has one (the BMv2 kit);
- LOOPS processes that spin (`sh -c 'while :; do :; done'`, as a second user's job would),
  started before the command and killed after it, however it ends;
- the 1/5/15-minute load averages (/proc/loadavg) at the start, every INTERVAL seconds and at
  the end;
- every switch a run declared hung (AGGLAB_HANG_AUDIT, emulation/switch_failures.audit_hang),
  with what its process was doing then: a "stopped" one is a test's own SIGSTOP, any other
  state is a live switch fenced by mistake;
- each failed test with its report as it happens (AGGLAB_FAILURE_LOG, tests/failure_log.py),
  so that a pass stopped half-way still says why.

It writes OUT/summary.json, OUT/command.log and OUT/failures.txt and prints one summary line
per figure. Exit status: the command's.

    sudo .venv/bin/python tools/under_load.py                 # `CI=true bash .ci/run` beside 2 loops
    sudo .venv/bin/python tools/under_load.py --loops 2 -- make test PYTEST_ARGS="-x tests/test_web.py"
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from agglab.emulation.cluster.practice import STATE_DIR  # noqa: E402
from agglab.emulation.switch_failures import read_hang_audit  # noqa: E402

CI_COMMAND = ["bash", ".ci/run"]
SPIN = ["sh", "-c", "while :; do :; done"]


def loadavg() -> tuple[float, float, float]:
    with open("/proc/loadavg") as f:
        one, five, fifteen = f.read().split()[:3]
    return float(one), float(five), float(fifteen)


class LoadLog(threading.Thread):
    """Samples the load averages every `interval` s (and once at once) until stopped."""

    def __init__(self, interval: float):
        super().__init__(name="load-log", daemon=True)
        self.interval, self.samples = interval, []
        self.stopped = threading.Event()

    def run(self) -> None:
        while True:
            self.samples.append((round(time.time(), 1), *loadavg()))
            if self.stopped.wait(self.interval):
                return

    def stop(self) -> None:
        self.stopped.set()
        self.join()
        self.samples.append((round(time.time(), 1), *loadavg()))


def spin(loops: int) -> list[subprocess.Popen]:
    """`loops` busy loops, each in a session of its own (as a second user's job would be)."""
    return [subprocess.Popen(SPIN, start_new_session=True) for _ in range(loops)]


def stop(procs: list[subprocess.Popen]) -> None:
    for p in procs:
        if p.poll() is None:
            p.kill()
    for p in procs:
        p.wait()


def fresh_clone(dest: Path) -> str:
    """Clone this checkout's HEAD to `dest` (../shared linked beside it when there is one);
    returns the commit."""
    subprocess.run(["git", "clone", "-q", str(REPO), str(dest)], check=True)
    shared, beside = REPO.parent / "shared", dest.parent / "shared"
    if shared.is_dir() and not beside.exists():
        beside.symlink_to(shared)
    return subprocess.run(["git", "-C", str(dest), "rev-parse", "--short", "HEAD"], check=True,
                          capture_output=True, text=True).stdout.strip()


def clean(clone: Path, cluster_appeared: bool = False) -> None:
    """After a command stopped half-way: what its runs left behind (namespaces, processes, run
    directories whose maker is gone; pytest ends on SIGTERM without its teardown), removed by the
    clone's own `agglab clean`, which leaves every live run alone; and a practice cluster that
    came up during the command (a cluster test's, stopped before its teardown), which `agglab
    clean` does not touch: it stayed up with BMv2 switches running in its servers, and the next
    pass skipped the 6 cluster tests ("a practice cluster is already up on this machine")."""
    python = clone / ".venv" / "bin" / "python"
    if python.exists():
        for what in (["clean"], *([["cluster", "local", "down"]] if cluster_appeared else [])):
            subprocess.run([str(python), "-m", "agglab", *what], cwd=clone, stdin=subprocess.DEVNULL,
                           capture_output=True, timeout=300)


def practice_cluster_up() -> bool:
    """Whether a practice cluster's state directory exists."""
    return STATE_DIR.exists()


def hangs(path: Path) -> dict:
    """The declared hangs (emulation/switch_failures.py writes and reads them): how many in
    each state, and the ones not stopped on purpose."""
    rows = read_hang_audit(path)
    return {"declared": len(rows), "states": dict(Counter(r.get("state") or "unknown" for r in rows)),
            "not_stopped": [r for r in rows if r.get("state") != "stopped"]}


def failures(path: Path) -> list[str]:
    """The tests that failed, as tests/failure_log.py wrote them while the suite ran (id and phase)."""
    if not path.exists():
        return []
    return [line[4:].split(" failed at ")[0] for line in path.read_text().splitlines() if line.startswith("=== ")]


def summarize(samples: list[tuple], rc: int, seconds: float, commit: str, loops: int, command: list[str],
              hang: dict, failed: list[str], sessions: list[str] | None = None) -> dict:
    ones = [s[1] for s in samples]
    return {"commit": commit, "command": command, "loops": loops, "returncode": rc,
            "seconds": round(seconds, 1), "load_start": list(samples[0][1:]), "load_end": list(samples[-1][1:]),
            "load_1min": {"min": min(ones), "median": statistics.median(ones), "max": max(ones)},
            "samples": samples, "hangs": hang, "failed": failed, "sessions": sessions or []}


SESSION_END = re.compile(r"^=*\s*(\d+ (?:passed|failed)\b.* in [\d.]+s\b.*?)\s*=*$")


def sessions(log: Path) -> list[str]:
    """Each pytest session's last line in the command's log ("2250 passed, 6 skipped ... in
    2974.46s"): a pass with no failure can still end non-zero, as one did on 6 skips (CI allows
    none), and the exit status alone does not say so."""
    try:
        text = log.read_text(errors="replace")
    except OSError:
        return []
    return [m.group(1) for line in text.splitlines() if (m := SESSION_END.match(line.strip()))]


def lines(s: dict) -> list[str]:
    load = s["load_1min"]
    hang = s["hangs"]
    out = [f"commit {s['commit']}: {' '.join(s['command'])} beside {s['loops']} busy loop(s)",
           f"exit {s['returncode']} after {s['seconds']:.0f} s",
           f"load (1-minute, {len(s['samples'])} samples): min {load['min']:.2f}, median {load['median']:.2f}, "
           f"max {load['max']:.2f}; start {s['load_start']}, end {s['load_end']}",
           f"declared hung: {hang['declared']} ({', '.join(f'{k} {v}' for k, v in sorted(hang['states'].items())) or 'none'}); "
           f"not stopped on purpose: {len(hang['not_stopped'])}"]
    out += [f"  {r.get('switch')} was {r.get('state') or 'unknown'} (run {r.get('run')})" for r in hang["not_stopped"]]
    out.append(f"tests failed: {len(s['failed'])}" + (" (each with its report in failures.txt)" if s["failed"] else ""))
    out += [f"  {name}" for name in s["failed"]]
    out += [f"pytest: {line}" for line in s.get("sessions", [])]
    return out


def _raise_exit(signum, _frame) -> None:
    """SIGTERM or SIGHUP as an exception in the main thread, so that the command's process
    group is ended and the loops stopped (Python's default for them ends at once, cleaning
    nothing)."""
    raise SystemExit(128 + signum)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="tools/under_load.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--loops", type=int, default=2, help="busy loops beside the command (default 2)")
    ap.add_argument("--interval", type=float, default=60.0, help="seconds between load samples (default 60)")
    ap.add_argument("--out", type=Path, help="where the log and summary go (default: a new directory under /tmp)")
    ap.add_argument("--keep-clone", action="store_true", help="leave the clone in place afterwards")
    ap.add_argument("command", nargs="*", help="run this in the clone instead of `CI=true bash .ci/run`")
    args = ap.parse_args(argv)
    if args.loops < 0 or args.interval <= 0:
        ap.error("--loops must be >= 0 and --interval > 0")
    command = args.command or CI_COMMAND
    out = args.out or Path(tempfile.mkdtemp(prefix="agglab-under-load-"))
    out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="agglab-clone-"))
    work.chmod(0o755)      # as a checkout anywhere: tests run parts of it as another user (nobody)
    clone = work / "agglab"
    commit = fresh_clone(clone)
    env = {**os.environ, "AGGLAB_HANG_AUDIT": str(out / "hangs.jsonl"), "AGGLAB_FAILURE_LOG": str(out / "failures.txt"),
           **({} if args.command else {"CI": "true"})}
    for name in ("hangs.jsonl", "failures.txt"):
        (out / name).unlink(missing_ok=True)
    log = LoadLog(args.interval)
    cluster_before = practice_cluster_up()
    procs: list[subprocess.Popen] = []
    start = time.monotonic()
    rc = 1
    for sig in (signal.SIGTERM, signal.SIGHUP):     # a kill ends the command and the loops too
        signal.signal(sig, _raise_exit)
    try:
        log.start()
        procs = spin(args.loops)
        with open(out / "command.log", "w") as f:
            child = subprocess.Popen(command, cwd=clone, env=env, stdin=subprocess.DEVNULL, stdout=f,
                                     stderr=subprocess.STDOUT, start_new_session=True)
            try:
                rc = child.wait()
            except (SystemExit, KeyboardInterrupt) as stop_now:     # SIGTERM/SIGHUP (_raise_exit), ^C
                os.killpg(child.pid, signal.SIGTERM)
                child.wait()
                rc = stop_now.code if isinstance(stop_now, SystemExit) else 128 + signal.SIGINT
                clean(clone, cluster_appeared=not cluster_before and practice_cluster_up())
    finally:
        seconds = time.monotonic() - start
        stop(procs)
        log.stop()
        if not args.keep_clone:
            shutil.rmtree(work, ignore_errors=True)
    summary = summarize(log.samples, rc, seconds, commit, args.loops, command, hangs(out / "hangs.jsonl"),
                        failures(out / "failures.txt"), sessions(out / "command.log"))
    (out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    for line in lines(summary) + [f"log and summary: {out}"]:
        print(line)
    return rc


if __name__ == "__main__":
    sys.exit(main())
