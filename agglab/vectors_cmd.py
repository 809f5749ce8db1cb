"""`agglab vectors run FILE... [--target soft|soft-batch|bmv2]`: replay conformance vector files.

Why a command: the differential test (tests/test_difftest.py) writes each divergence it
finds as a vector file outside p4src/vectors/; replaying that one file on the twin or on
BMv2, without pytest, is how one looks at it (and then fixes the side that is wrong). The
runner is the conformance tests' own (agglab/testkit/conformance.py), so a file passes
here exactly when it would pass in tests/conformance/.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path


def add_parser(sub) -> None:
    v = sub.add_parser("vectors", help="replay conformance vector files (p4src/vectors format) on the "
                       "software switch or BMv2")
    vsub = v.add_subparsers(dest="vectors_cmd", required=True)
    r = vsub.add_parser("run", help="run vector files; exit 1 if any fails")
    r.add_argument("files", nargs="+", metavar="FILE", help="vector files (YAML)")
    r.add_argument("--target", choices=["soft", "soft-batch", "bmv2"], default="soft",
                   help="soft: the software switch per frame (default); soft-batch: through its batched "
                        "path; bmv2: simple_switch in a network namespace (root, p4c)")
    r.set_defaults(func=_run)


def _target(kind: str, vectors):
    if kind != "bmv2":
        from agglab.testkit.soft_target import SoftTarget  # lazy: loads numpy, only _target() needs it
        return SoftTarget(batch=kind == "soft-batch")
    from agglab.testkit.bmv2_target import Bmv2Target, find_tools  # lazy: loads numpy, only _target() needs it

    tools = find_tools()
    if tools is None:
        raise SystemExit("agglab vectors: BMv2 simple_switch/p4c not found (PATH or /opt/p4/bin)")
    if os.geteuid() != 0:
        raise SystemExit("agglab vectors: --target bmv2 needs root (a network namespace)")
    ports = set().union(*(v.ports for v in vectors))
    target = Bmv2Target(tools, Path(tempfile.mkdtemp(prefix="agglab-vectors-")), max(ports) + 1)
    target.start()
    return target


def _load(load, name: str):
    """One vector file, or ValueError with one line saying why it is not one (a missing file,
    not YAML, a missing or mistyped field: the loader reads the format, it does not explain it)."""
    import yaml  # lazy: PyYAML, only when a vector file is read

    try:
        vector = load(Path(name))
    except OSError as exc:
        raise ValueError(f"{name}: {exc.strerror or exc}") from None
    except (UnicodeDecodeError, yaml.YAMLError) as exc:
        raise ValueError(f"{name}: not a YAML text file ({str(exc).splitlines()[0]})") from None
    except (ValueError, KeyError, TypeError, AttributeError, IndexError) as exc:
        raise ValueError(f"{name}: not a vector file ({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}; "
                         "see p4src/vectors/)") from None
    if not vector.steps:
        raise ValueError(f"{name}: not a vector file (no packets; see p4src/vectors/)")
    return vector


def _run(args) -> int:
    from agglab.testkit.conformance import run_vector  # lazy: loads PyYAML, only _run() needs it
    from agglab.testkit.vectors import load  # lazy: loads PyYAML, only _run() needs it

    try:
        vectors = [_load(load, f) for f in args.files]
    except ValueError as exc:
        print(f"agglab vectors run: {exc}", file=sys.stderr)
        return 2
    target = _target(args.target, vectors)
    failed = 0
    try:
        for path, vector in zip(args.files, vectors):
            try:
                run_vector(target, vector, ordered=args.target != "bmv2")
                print(f"PASS {path} ({args.target})")
            except AssertionError as exc:
                failed += 1
                print(f"FAIL {path} ({args.target}): {exc}")
            except Exception as exc:             # the target itself failed (a crash in the twin)
                failed += 1
                print(f"FAIL {path} ({args.target}): {type(exc).__name__}: {exc}")
    finally:
        target.close()
        workdir = getattr(target, "workdir", None)
        if workdir is not None:
            shutil.rmtree(workdir, ignore_errors=True)
    print(f"{len(vectors) - failed} of {len(vectors)} vector(s) pass on {args.target}", file=sys.stderr)
    return 1 if failed else 0
