"""`agglab allreduce --web`: the page is served while the one run goes (its URL on stderr, the
JSON result alone on stdout), shows the run and its reroute, refuses to start another
allreduce, and is gone when the run ends."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from agglab.testkit.waits import wait_until
from tests.leftovers import assert_clean

pytestmark = [pytest.mark.root, pytest.mark.mininet, pytest.mark.slow, pytest.mark.net_timeout(600)]

REPO = Path(__file__).resolve().parent.parent


def _get(url: str):
    with urllib.request.urlopen(url, timeout=10) as r:
        return json.loads(r.read())


def test_allreduce_serves_its_page_while_it_runs(tmp_path):
    proc = subprocess.Popen([sys.executable, "-m", "agglab", "allreduce", "--web", "--json", "--topology", "fattree",
                             "--workers", "8", "--elements", "1500000", "--bw", "10", "--fail", "tree@0.3"],
                            cwd=str(tmp_path), env=dict(os.environ, PYTHONPATH=str(REPO)), text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        url = None
        for line in proc.stderr:
            m = re.search(r"live page: (\S+)", line)
            if m:
                url = m.group(1)
                break
        assert url and url.startswith("http://127.0.0.1:"), url
        base, token = url.split("/?token=")
        seen, answers = [], []

        def ended() -> bool:
            """One look at the page (and, once it shows the run, one allreduce asked of it);
            True when the run, and the server with it, has ended."""
            if proc.poll() is not None:
                return True
            try:
                st = _get(f"{base}/api/state?token={token}")
            except (urllib.error.URLError, ConnectionError):
                return True
            if "run" in st:
                seen.append((st["run"]["running"], st["jobs"][0]["epoch"], len(st["reroutes"])))
            if seen and not answers:                     # refused: the page belongs to this run
                req = urllib.request.Request(f"{base}/api/action?token={token}", method="POST",
                                             data=json.dumps({"do": "allreduce"}).encode(),
                                             headers={"Content-Type": "application/json"})
                try:
                    with urllib.request.urlopen(req, timeout=10) as r:
                        answers.append((r.status, json.loads(r.read())))
                except urllib.error.HTTPError as exc:        # refused: 400 and its one line
                    answers.append((exc.code, json.loads(exc.read())))
            return False

        wait_until(ended, 300, "the run to end", every=0.1)
        out, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    result = json.loads(out)
    assert result["exact"], err[-2000:]
    assert (True, 0, 0) in seen and (True, 1, 1) in seen, seen    # the run, then its reroute, live
    assert len(answers) == 1, seen                                # asked while the page showed the run
    [(status, answer)] = answers
    assert status == 400 and answer["ok"] is False and "agglab lab --web" in answer["message"], answers
    with pytest.raises(urllib.error.URLError, match="Connection refused"):
        _get(f"{base}/api/state?token={token}")
    assert_clean()
