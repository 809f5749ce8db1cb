"""The wide variant's generated vectors are current, and the exercises have theirs.

Why: `make test K=256` grades the exercises with p4src/vectors/k256/; a vector edited at K=64
without regenerating its wide copy would test old behaviour there."""

from __future__ import annotations

from agglab.exercise_folders import exercises
from agglab.testkit import widen
from agglab.ground.paths import VECTORS


def test_generated_wide_vectors_are_current():
    generated = [p for p in sorted((VECTORS / "k256").glob("*.yaml")) if p.read_text().startswith("# Generated")]
    assert generated
    for path in generated:
        original = (VECTORS / path.name).read_text()
        assert path.read_text() == widen.widen(original, path.stem), \
            f"{path} is stale: python -m agglab.testkit.widen {path.stem}"


def test_every_vector_an_exercise_uses_exists_in_both_variants():
    used = [(ex.number, name) for ex in exercises() for name in ex.vectors]
    assert used
    for number, name in used:
        assert (VECTORS / f"{name}.yaml").is_file(), (number, name)
        assert (VECTORS / "k256" / f"{name}.yaml").is_file(), (number, name)


def test_lane_indices_move_to_the_wide_rows():
    assert widen.lane(5 * 64 + 3) == 5 * 256 + 3
    text = "  - register_write agg_values 320 1000\n  agg_values[320:324]: [1]\n  agg_values[65599:65601]: [-3, 0]\n"
    out = widen.widen(text, "x").splitlines()[2:]
    assert out == ["  - register_write agg_values 1280 1000", "  agg_values[1280:1284]: [1]",
                   "  agg_values[262399:262401]: [-3, 0]"]
