"""Compile p4src/agglab.p4 with p4c for BMv2, cached by the hash of the P4 sources and K.

Every build first writes p4src/include/schemes.p4 from the scheme table (agglab.softswitch.schemes
.write_p4: each P4 scheme's include, instance and branch), which is built, not committed.

The program variant (K values per packet, agglab.ground.wire.K from AGGLAB_K) is a
preprocessor define, so each variant has its own build directory and JSON.
"""

from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path

from agglab.ground import wire
from agglab.ground import paths
from agglab.ground.paths import P4SRC
from agglab.controller.bmv2_tools import find_bmv2_tool
from agglab.softswitch.schemes import write_p4

BUILD = paths.BUILD / "p4"


def sources_digest(src: Path | None = None) -> str:
    """The hash of this variant and every P4 source under `src` (default p4src/): equal for
    a copy of p4src/ (an exercise's overlay holding the solution), so that copy need not be
    compiled again (agglab/testkit/bmv2_target.py)."""
    h = hashlib.sha256(f"AGG_K={wire.K}".encode())
    for path in sorted((src or P4SRC).rglob("*.p4")):
        h.update(path.name.encode() + path.read_bytes())
    return h.hexdigest()[:16]


def p4c_options() -> list[str]:
    """p4c's options for this run's variant (-DAGG_K): also what p4-utils' p4run is given."""
    return ["--target", "bmv2", "--arch", "v1model", f"-DAGG_K={wire.K}"]


def p4c_command(p4c: str, program: Path, out_dir: Path) -> list[str]:
    """p4c's command line for `program` as this run's variant."""
    return [p4c, *p4c_options(), "-o", str(out_dir), str(program)]


def compile_p4(out_dir: Path | None = None) -> Path:
    """Return the BMv2 JSON of agglab.p4, compiling only if the sources changed."""
    out_dir = out_dir or BUILD / f"k{wire.K}"
    out_dir.mkdir(parents=True, exist_ok=True)
    json_path = out_dir / "agglab.json"
    stamp = out_dir / "agglab.digest"
    write_p4(P4SRC / "include")
    digest = sources_digest()
    if json_path.exists() and stamp.exists() and stamp.read_text() == digest:
        return json_path
    p4c = find_bmv2_tool("p4c")
    if not p4c:
        raise RuntimeError("p4c not found: install p4c (sudo scripts/provision-vm.sh, or the Vagrant VM) "
                           "or use --backend soft")
    proc = subprocess.run(p4c_command(p4c, P4SRC / "agglab.p4", out_dir), capture_output=True, text=True)
    if proc.returncode != 0 or not json_path.exists():
        raise RuntimeError(f"p4c failed on {P4SRC / 'agglab.p4'}:\n{proc.stderr[-3000:]}")
    stamp.write_text(digest)
    return json_path
