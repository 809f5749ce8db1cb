"""Leaving a run's namespace keeps the working directory (ground/netns.py).

setns(2) into a mount namespace moves the caller to that namespace's root, so a suite whose
results path is relative (`make experiment` writes `results/NAME/runs.jsonl`) lost it after
its first run: "No such file or directory: 'results/bmv2-bmv2/runs.jsonl'".
"""

from __future__ import annotations

import os
import threading

import pytest

from agglab.ground import netns

pytestmark = [pytest.mark.root]


def test_leaving_a_run_namespace_keeps_the_threads_working_directory(tmp_path):
    seen: dict[str, str] = {}

    def run() -> None:
        space = netns.RunNamespace().create()
        try:
            os.chdir(tmp_path)
            space.enter()
            space.leave()
            seen["after"] = os.getcwd()
        finally:
            space.delete()

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(60)
    assert seen.get("after") == str(tmp_path)
