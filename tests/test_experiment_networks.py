"""The topology file an experiment point writes (experiments/networks.py) holds every job's
workers: with `jobs`, the jobs share one network, so it must rank workers x jobs hosts.

Found running the ATP trend on a leaf-spine (2026-12-06): every run failed at start with
"ranks 4 hosts as workers: give --workers 4 in all (--workers x --jobs = 16)".
"""

from __future__ import annotations

import yaml

from agglab.experiments.networks import network_for


def _ranked(path: str) -> int:
    with open(path) as f:
        hosts = yaml.safe_load(f)["nodes"]["hosts"]
    return sum(1 for h in hosts if "rank" in h)


def test_a_leaf_spine_with_jobs_ranks_every_jobs_workers(tmp_path):
    run = {"topology": "leafspine", "workers": 4, "jobs": 4}
    spec = network_for(run, {}, 1.0, tmp_path)
    assert _ranked(spec["topology"]) == 16                 # 4 jobs x 4 workers, by hand


def test_a_fat_tree_with_jobs_and_oversubscription_ranks_every_jobs_workers(tmp_path):
    run = {"topology": "fattree", "k": 4, "workers": 2, "jobs": 3}
    spec = network_for(run, {"oversubscription": 2}, 1.0, tmp_path)
    assert _ranked(spec["topology"]) == 6


def test_without_jobs_the_file_ranks_the_workers(tmp_path):
    spec = network_for({"topology": "leafspine", "workers": 5}, {}, 1.0, tmp_path)
    assert _ranked(spec["topology"]) == 5
