"""ground/limits.py: kernel.pid_max raised only when a run's threads would not fit."""

from __future__ import annotations

from ground.limits import MARGIN, ensure_pid_room, tasks_now
from hosts.ps import threads_per_worker


def test_a_ps_of_128_workers_needs_more_pids_than_debians_default(tmp_path):
    """128 workers x (4 x 127 + 2) = 65,280 threads; beside 1,000 tasks and the margin they
    need 70,376 pids, so 32,768 becomes twice that, 140,752."""
    path = tmp_path / "pid_max"
    path.write_text("32768\n")
    threads = 128 * threads_per_worker(128)
    assert threads == 65_280
    note = ensure_pid_room(threads, path, existing=1000)
    assert path.read_text() == "140752\n"
    assert "from 32,768 to 140,752" in note and "65,280 threads" in note


def test_room_enough_leaves_it_alone(tmp_path):
    path = tmp_path / "pid_max"
    path.write_text("32768\n")
    assert ensure_pid_room(8 * threads_per_worker(8), path, existing=32768 - 8 * 30 - MARGIN) is None      # exactly fits
    assert path.read_text() == "32768\n"


def test_a_limit_that_cannot_be_raised_is_said(tmp_path):
    (tmp_path / "pid_max").write_text("32768\n")     # writing fails as in a container's /proc/sys
    note = ensure_pid_room(100_000, _ReadOnlyPath(tmp_path / "pid_max"), existing=10)
    assert "could not be raised" in note and "sysctl -w kernel.pid_max=" in note


class _ReadOnlyPath:
    def __init__(self, path):
        self.path = path

    def read_text(self):
        return self.path.read_text()

    def write_text(self, text):
        raise PermissionError(13, "Permission denied")


def test_tasks_now_reads_the_kernels_count(tmp_path):
    loadavg = tmp_path / "loadavg"
    loadavg.write_text("0.50 0.60 0.70 3/1234 5678\n")
    assert tasks_now(loadavg) == 1234
