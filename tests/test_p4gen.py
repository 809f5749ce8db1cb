"""The committed p4src/include/values.p4 is exactly what agglab.p4gen writes.

Why: values.p4 is generated but committed (p4c needs it without running
Python); after a change of AGG_K or AGG_MAX_WORKERS, or of the generator, a
stale file would silently compile the old lane or child count.
"""

from __future__ import annotations

import re
import subprocess

from agglab import p4gen
from agglab.ground import wire


def test_committed_values_p4_matches_generator():
    want = p4gen.render(wire.K_VARIANTS, wire.MAX_WORKERS)
    assert p4gen.TARGET.read_text() == want, "run `make p4gen` (python -m agglab.p4gen) and commit"


def test_macros_cover_every_lane_and_child():
    text = p4gen.render((5,), 3)
    lanes = re.search(r"#define AGG_FOR_EACH_VALUE\(OP\)(.*?)\n\n", text, re.S).group(1)
    children = re.search(r"#define AGG_FOR_EACH_CHILD\(OP\)(.*?)\n\n", text, re.S).group(1)
    assert re.findall(r"OP\((\d+)\)", lanes) == ["0", "1", "2", "3", "4"]
    assert re.findall(r"OP\((\d+)\)", children) == ["0", "1", "2"]
    assert text.count("bit<32> v") == 5


def _preprocess(text: str, k: int) -> str:
    """What a C preprocessor keeps of `text` under -DAGG_K=k (p4c runs cpp too)."""
    proc = subprocess.run(["cpp", "-P", f"-DAGG_K={k}", "-"], input=text, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_each_variant_gets_its_own_lanes_and_others_are_refused():
    text = p4gen.render((5, 7), 3)
    for k in (5, 7):
        kept = _preprocess(text + "\nAGG_FOR_EACH_VALUE(LANE)\n", k)
        assert re.findall(r"bit<32> v(\d+);", kept) == [str(i) for i in range(k)]
        assert re.findall(r"LANE\((\d+)\)", kept) == [str(i) for i in range(k)]
    proc = subprocess.run(["cpp", "-P", "-DAGG_K=6", "-"], input=text, capture_output=True, text=True)
    assert proc.returncode != 0 and "AGG_K must be 5 or 7" in proc.stderr
