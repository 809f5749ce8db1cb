"""ground/progress.py: the worker's in-place progress file and its readers."""

from __future__ import annotations

import types

import pytest

from agglab.emulation.failures import read_progress
from agglab.ground import progress


class FakeClock:
    """time.monotonic for agglab.ground.progress: it moves only when the test says so."""

    def __init__(self):
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch):
    fake = FakeClock()
    monkeypatch.setattr(progress, "time", types.SimpleNamespace(monotonic=fake.monotonic))
    return fake


def test_rewritten_in_place_and_read_back(tmp_path, clock):
    path = tmp_path / "rank0.progress"
    write = progress.ProgressFile(path)
    assert progress.read(path) is None                 # nothing reported yet
    write(3, 100)
    assert progress.read(path) == (3, 100)
    size = path.stat().st_size
    clock.now += progress.INTERVAL * 1.5
    write(70, 100)
    assert progress.read(path) == (70, 100)
    assert path.stat().st_size == size                 # fixed width: a reader never sees a short file
    write(100, 100)                                    # the last update lands whatever the interval
    assert progress.read(path) == (100, 100) and write.fd is None


def test_updates_within_the_interval_are_skipped(tmp_path, clock):
    path = tmp_path / "p"
    write = progress.ProgressFile(path)
    write(1, 10)
    clock.now += progress.INTERVAL * 0.9
    write(2, 10)                                       # within the interval: not written
    assert progress.read(path) == (1, 10)
    clock.now += progress.INTERVAL * 0.2
    write(3, 10)                                       # the interval has passed: written
    assert progress.read(path) == (3, 10)


def test_read_progress_is_the_slowest_worker(tmp_path):
    files = [tmp_path / f"rank{r}.progress" for r in range(3)]
    for f, done in zip(files[:2], (50, 20)):
        progress.ProgressFile(f)(done, 100)
    assert read_progress(files) == 0.0                 # rank 2 has not reported
    progress.ProgressFile(files[2])(80, 100)
    assert read_progress(files) == 0.2
    files[1].write_bytes(b"garbage")
    assert read_progress(files) == 0.0


def test_the_update_reaching_a_mark_is_written_within_the_interval(tmp_path, clock):
    """A scripted failure at 50% (`marks`) reads the files: the update that reaches 50% is not
    held back by the interval, as it was (0.10 s late at 128 workers, 8% of a 1.27 s run)."""
    path = tmp_path / "p"
    write = progress.ProgressFile(path, interval=progress.INTERVAL_MAX, marks=(0.5, 0.3))
    write(1, 10)
    clock.now += progress.INTERVAL_MAX * 0.1
    write(2, 10)                                       # within the interval: not written
    assert progress.read(path) == (1, 10)
    write(3, 10)                                       # reaches 0.3: written
    assert progress.read(path) == (3, 10)
    write(4, 10)
    assert progress.read(path) == (3, 10)
    write(6, 10)                                       # jumps past 0.5: written
    assert progress.read(path) == (6, 10)
    write(7, 10)                                       # past every mark: the interval again
    assert progress.read(path) == (6, 10)
