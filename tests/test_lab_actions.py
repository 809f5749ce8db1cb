"""agglab/actions.py without a network: the background allreduce's outcome is said before
the run counts as finished, so a lab script's `wait` never moves on before it is printed."""

from __future__ import annotations

import threading
from types import SimpleNamespace

from agglab.actions import Actions


class _Spec:
    def with_(self, **opts):
        return self


def test_wait_returns_only_after_the_outcome_was_said():
    said = []
    job = SimpleNamespace(trees=lambda: None, switch_stats=lambda: {}, state=lambda: SimpleNamespace(tree="rat"))
    session = SimpleNamespace(job=job, jobs=[job], spec=_Spec(), cancelled=threading.Event(),
                              allreduce=lambda **opts: {"exact": True})

    def say(line):                        # the order itself, not a preemption made likely by a sleep
        said.append((line, actions.run.finished.is_set()))

    actions = Actions(session, say=say)
    actions.allreduce({}, lambda r: "allreduce: exact")
    assert actions.run.finished.wait(60)   # a hang guard only
    assert said == [("allreduce: exact", False)]     # said while the run still counted as running
