"""Each exercise's README against its skeleton: every file, region and identifier it names in
`backticks` exists where the student looks for it.

Why: exercise 2's README once sent students to a `fields` dict, a timer heap and a `seq` the
code did not have, while the in-code hints were right; nothing compared the two. The
skeleton is what `agglab exercise start` writes (the regions emptied, their hints kept), so
a name the README uses must survive in it, or in a file the README names, a vector, or (for
the lab exercise) a lab command.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from agglab import exercise
from agglab.ground.paths import REPO

EXERCISES = exercise.exercises()
SPAN = re.compile(r"`([^`\n]+)`")
FILE = re.compile(r"^[\w./-]+\.(py|p4|yaml|md)$")
REGION = re.compile(r"^[a-z]+(-[a-z]+)+$")                 # shadow-copy, rack-aware (a1-c1 is a link)
IDENT = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")     # ver, SlotRun.expire, self.exp_next
LAB_COMMANDS = set(re.findall(r"def do_(\w+)", (REPO / "agglab/lab.py").read_text())) | {"exit", "sh"}
PATH = re.compile(r"\b((?:[\w-]+/)+[\w.-]+\.(?:py|p4|yaml))\b")      # a path named without backticks
VECTORS = {p.stem for p in (REPO / "p4src/vectors").glob("*.yaml")}


def spans(text: str) -> list[str]:
    return [s.strip() for s in SPAN.findall(text)]


def problems(ex, work: Path) -> list[str]:
    """What the README names that the skeleton in `work` (and the repo) does not have."""
    text = (ex.folder / "README.md").read_text()
    found = spans(text)
    named_files = [s for s in found if FILE.match(s)] + PATH.findall(text)
    out = [f"file `{f}` exists nowhere" for f in named_files
           if not (work / f).exists() and not (REPO / f).exists() and not (ex.folder / f).exists()]
    sources = {f: (work / f if (work / f).exists() else REPO / f).read_text()
               for f in (*ex.files, *ex.extra, *named_files) if (work / f).exists() or (REPO / f).exists()}
    words = set(re.findall(r"\w+", " ".join(sources.values()))) | VECTORS | LAB_COMMANDS
    for s in found:
        if REGION.match(s):
            if s not in ex.regions:
                out.append(f"region `{s}` is not one of exercise {ex.number}'s ({', '.join(ex.regions)})")
        elif IDENT.match(s) and s not in ex.regions:
            head, _, tail = s.partition(".")
            if head == "self" or not tail or not head[0].isupper():     # a name, self.x, a local's x
                missing = [n for n in (s.split(".")[1:] if head == "self" else s.split(".")) if n not in words]
                if missing:
                    out.append(f"`{s}`: no `{missing[0]}` in the skeleton or the files it names")
            elif not any(re.search(rf"^\s*class {head}\b", src, re.M) and re.search(rf"\bdef {tail}\b", src)
                         for src in sources.values()):
                out.append(f"`{s}`: no class {head} with a method {tail} in the exercise's files")
    out += [f"region {r} is never named" for r in ex.regions if f"`{r}`" not in text]
    return out


@pytest.mark.parametrize("ex", EXERCISES, ids=lambda e: e.slug)
def test_readme_names_only_what_the_skeleton_has(ex, tmp_path):
    exercise.start(ex, tmp_path / "w")
    assert problems(ex, tmp_path / "w") == []


def test_a_readme_naming_what_the_code_lacks_is_caught(tmp_path):
    """Exercise 2's README as it was: a `seq` kept on a timer heap, and `SlotAgent.expire`
    (the class is SlotRun); a region and a file that do not exist."""
    ex = exercise.get(2)
    exercise.start(ex, tmp_path / "w")
    readme = tmp_path / "README.md"
    readme.write_text((ex.folder / "README.md").read_text()
                      + "\n- Keep `seq` when re-arming; `SlotAgent.expire`; region `timer-heap`; "
                        "`hosts/heap.py`.\n")
    from dataclasses import replace

    found = problems(replace(ex, folder=tmp_path), tmp_path / "w")
    assert any("`seq`" in p for p in found), found
    assert any("SlotAgent.expire" in p for p in found), found
    assert any("`timer-heap`" in p for p in found), found
    assert any("hosts/heap.py" in p for p in found), found
