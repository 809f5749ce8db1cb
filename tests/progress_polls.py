"""What the injector tests share (test_failure_choice.py, test_chaos_choice.py): a count of the
progress-file reads of an injector module, and workers' progress written as they would."""

from __future__ import annotations

from agglab.ground import progress


def count_polls(monkeypatch, module) -> list[int]:
    """How often `module.read_progress` has been called (one mutable count); once an injector
    has read twice, it is waiting."""
    count = [0]
    real = module.read_progress

    def counted(files):
        count[0] += 1
        return real(files)
    monkeypatch.setattr(module, "read_progress", counted)
    return count


def report(files, done: int) -> None:
    """Every worker's progress file says `done` of 100."""
    for f in files:
        progress.ProgressFile(f)(done, 100)
