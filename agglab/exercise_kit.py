"""What an exercise's checks are built from: exercises/<N>-<slug>/check.py imports these.

A check is a dict {name, ok, detail} (a failed conformance check also carries "packets", the
frames in full, which `check --verbose` and the JSON grade show). The helpers here are the
ones more than one exercise, or the checker itself (agglab/exercise_runner.py), uses: the
conformance vectors on a target, an end-to-end allreduce by real agents through the software
switch, and the wording of a failure (where in the student's file, what the check is about).

The project's modules are imported inside the functions: `agglab exercise list` loads every
check.py for its title, and numpy, the test kit and the agents are not needed for that.
"""

from __future__ import annotations

import textwrap
import traceback

from agglab.ground.paths import REPO


def result(name: str, ok: bool, detail: str = "") -> dict:
    return {"name": name, "ok": bool(ok), "detail": detail}


def short_error(exc: BaseException) -> str:
    """The student's exception and where in their file it came from."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if "agglab-exercise-" in f.filename]
    if not frames:
        return f"{type(exc).__name__}: {exc}"
    rel = frames[-1].filename.split("/overlay/", 1)[-1]      # the path in the student's work folder
    return f"{type(exc).__name__}: {exc} (at {rel}:{frames[-1].lineno})"


def wrap(text: str) -> str:
    """An explanation in lines of a terminal's width, indented under its check."""
    return textwrap.fill(text, width=96, initial_indent="  ", subsequent_indent="    ")


def explain(check: dict, about: str) -> dict:
    """Add what a failing end-to-end check needs, in words (the conformance details are exact)."""
    if not check["ok"]:
        check["detail"] += "\n" + wrap("what this checks: " + about)
    return check


def conformance(target, names, ordered: bool, label: str, folder=None) -> list[dict]:
    """Each named vector on `target`; the first differing packet or register on failure.
    `folder`: where the vectors are, if not p4src/vectors (an exercise's own, in its folder)."""
    from agglab.testkit.conformance import run_vector  # lazy: loads PyYAML, only conformance() needs it
    from agglab.testkit.vectors import VECTOR_DIR, load  # lazy: loads PyYAML, only conformance() needs it

    folder = folder or VECTOR_DIR
    out = []
    for name in names:
        vector = load(folder / f"{name}.yaml")
        about = " ".join(vector.description.split())
        try:
            run_vector(target, vector, ordered=ordered)
            out.append(result(f"conformance {name} ({label})", True))
        except AssertionError as exc:
            first, _, packets = str(exc).partition("\n  sent:\n")
            check = result(f"conformance {name} ({label})", False,
                           f"{first}\n{wrap('what this vector checks: ' + about)}\n"
                           f"  (the whole vector: {(folder / name).relative_to(REPO)}.yaml)")
            if packets:             # the frames in full: `check --verbose` and the JSON grade show them
                check["packets"] = "  sent:\n" + packets
            out.append(check)
        except Exception as exc:
            out.append(result(f"conformance {name} ({label})", False, short_error(exc)))
    return out


def first_difference(got, expected) -> str:
    """The first element where two equal-length arrays differ, and both values: no guess why."""
    import numpy as np  # lazy: numpy, only when a check compares arrays (`exercise list` loads this)

    bad = int(np.flatnonzero(np.asarray(got) != np.asarray(expected))[0])
    return f"element {bad} is {got[bad]}, expected {expected[bad]}"


def allreduce_soft(name: str, n: int, arrays, expected, **kw) -> dict:
    """One allreduce by n real agents through the software switch (agglab/testkit/fakenet.py)."""
    import numpy as np  # lazy: numpy, only allreduce_soft() needs it

    from agglab.testkit.fakenet import FakeNet  # lazy: loads numpy, only allreduce_soft() needs it

    loss, seed = kw.pop("loss", 0.0), kw.pop("seed", 0)
    try:
        results = FakeNet(n, backend="pipeline", loss=loss, seed=seed).run(arrays, join_timeout=60, give_up=5, **kw)
    except AssertionError as exc:
        return result(name, False, str(exc))
    for rank, r in enumerate(results):
        if isinstance(r, BaseException):
            return result(name, False, f"rank {rank}: {short_error(r)}")
        out, stats = r
        if not np.array_equal(out, expected):
            return result(name, False, f"rank {rank}: {first_difference(out, expected)}")
    s = results[0][1]
    return result(name, True, f"{n} workers x {len(expected)} int32 exact, "
                              f"{s.retransmissions} retransmissions at rank 0")


def dense_allreduce(name: str, n: int = 4, length: int = 4096, **kw) -> dict:
    import numpy as np  # lazy: numpy, only dense_allreduce() needs it

    rng = np.random.default_rng(7)
    arrays = [rng.integers(-1000, 1000, length, dtype=np.int32) for _ in range(n)]
    return allreduce_soft(name, n, arrays, np.sum(np.stack(arrays), axis=0, dtype=np.int32), **kw)
