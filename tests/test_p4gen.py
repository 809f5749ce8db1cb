"""The committed p4src/include/values.p4 is exactly what agglab.p4gen writes.

Why: values.p4 is generated but committed (p4c needs it without running
Python); after a change of AGG_K or AGG_MAX_WORKERS, or of the generator, a
stale file would silently compile the old lane or child count.
"""

from __future__ import annotations

import re

from agglab import p4gen
from ground import wire


def test_committed_values_p4_matches_generator():
    want = p4gen.render(wire.K, wire.MAX_WORKERS)
    assert p4gen.TARGET.read_text() == want, "run `make p4gen` (python -m agglab.p4gen) and commit"


def test_macros_cover_every_lane_and_child():
    text = p4gen.render(5, 3)
    lanes = re.search(r"#define AGG_FOR_EACH_VALUE\(OP\)(.*?)\n\n", text, re.S).group(1)
    children = re.search(r"#define AGG_FOR_EACH_CHILD\(OP\)(.*?)\n\n", text, re.S).group(1)
    assert re.findall(r"OP\((\d+)\)", lanes) == ["0", "1", "2", "3", "4"]
    assert re.findall(r"OP\((\d+)\)", children) == ["0", "1", "2"]
    assert text.count("bit<32> v") == 5
