"""Every command the docs show is a real one.

Why: README.md and docs/ are where a new user copies commands from; a renamed option or a
make variable that does not exist fails only for that user. This test collects each `agglab
...`, `make ...` and `python -m agglab.bench ...` command (fenced code lines and inline code
spans) and each `agglab>` lab line from README.md, docs/ and exercises/, and checks it against
the real argparse parsers (commands, options; values are not judged), the Makefile (targets,
variables, and what `make bench` passes on), and the lab's commands. The cheap ones that need
no root also run for real: `make -n` of every make line, and `agglab exercise list`,
`agglab experiment ... --dry-run` and `agglab --help` as written.
"""

from __future__ import annotations

import argparse
import functools
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
DOCS = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md")), *sorted((REPO / "exercises").rglob("*.md"))]

_FENCE = re.compile(r"^\s*(```|~~~)")
_SPAN = re.compile(r"`([^`\n]+)`")
_PREFIX = re.compile(r"^(?:\$\s+)?(?:sudo\s+)?(?:env\s+(?:\w+=\S*\s+)+)?(?:flock\s+\S+\s+)?(?:\w+=\S*\s+)*"
                     r"(?:\S*/)?(?=agglab\b|make\b|python3?\b)")


def _shell_words(command: str) -> str:
    """The command alone: comment, pipes, redirections, && and ; chains and `&` cut off."""
    command = re.split(r"\s#\s|\s#$|^#", command, maxsplit=1)[0]
    return re.split(r"\s*(?:\|\|?|&&|;|\s&(?:\s|$)|\s\d?>\S*|\s<\s)", command, maxsplit=1)[0].strip()


def commands_in(text: str) -> list[tuple[int, str]]:
    """(line number, command) for each agglab/make/bench command or lab line in `text`."""
    found, fenced, diagram, pending = [], False, False, ""
    for n, line in enumerate(text.splitlines(), start=1):
        if _FENCE.match(line):
            fenced = not fenced
            diagram = fenced and line.strip().strip("`~") == "text"     # a drawing, not commands
            continue
        if fenced and diagram:
            continue
        if fenced:
            line = pending + line.strip()
            if line.endswith("\\"):
                pending = line[:-1] + " "
                continue
            pending = ""
            candidates = [line]
        else:
            candidates = _SPAN.findall(line)
        for c in candidates:
            c = c.strip()
            if c.startswith("agglab>"):
                found.append((n, c))
                continue
            m = _PREFIX.match(c)
            if not m:
                continue
            c = _shell_words(c[m.end():])
            if re.match(r"agglab(\s|$)|make(\s|$)|python3? -m agglab\.bench(\s|$)", c):
                found.append((n, c))
    return found


def _tokens(command: str) -> list[str]:
    """Words, with the docs' optional-part brackets and placeholders dropped."""
    try:
        words = shlex.split(command)
    except ValueError:
        words = command.split()
    out = []
    for w in words:
        w = w.strip("[]")
        if w and w not in ("...", "…", "|") and not w.startswith(("<", "..")):
            out.append(w)
    return out


# -- argparse ----------------------------------------------------------------------------
def _subparsers(parser: argparse.ArgumentParser):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return action
    return None


@functools.lru_cache(maxsize=None)
def _experiment_parser() -> argparse.ArgumentParser:
    from agglab.experiments.cli import build_parser

    return build_parser()


def check_argv(parser: argparse.ArgumentParser, words: list[str]) -> list[str]:
    """What is wrong with `words` as arguments of `parser`: unknown subcommands and options."""
    i, chosen = 0, False
    while i < len(words):
        w = words[i]
        if w.startswith("-") and len(w) > 1 and not re.fullmatch(r"-\d[\d.]*", w):
            name = w.split("=", 1)[0]
            action = parser._option_string_actions.get(name)
            if action is None:
                return [f"{parser.prog}: unknown option {name}"]
            if "=" not in w and action.nargs != 0:
                takes = 1 if action.nargs in (None, "?") else action.nargs
                if takes in ("*", "+"):
                    while i + 1 < len(words) and not words[i + 1].startswith("-"):
                        i += 1
                else:
                    i += takes if action.nargs is not None or i + 1 < len(words) else 0
        else:
            sub = _subparsers(parser)
            if sub is not None and not chosen:
                if w not in sub.choices:
                    return [f"{parser.prog}: unknown command {w!r} (commands: {', '.join(sub.choices)})"]
                chosen = True
                if w == "experiment":          # passes everything through to python -m agglab.experiments
                    return check_argv(_experiment_parser(), words[i + 1:])
                return check_argv(sub.choices[w], words[i + 1:])
        i += 1
    return []


@functools.lru_cache(maxsize=None)
def _agglab_parser() -> argparse.ArgumentParser:
    from agglab.cli import build_parser

    return build_parser()


@functools.lru_cache(maxsize=None)
def _bench_parser() -> argparse.ArgumentParser:
    from agglab.bench.cli import build_parser

    return build_parser()


def check_agglab(words: list[str]) -> list[str]:
    return check_argv(_agglab_parser(), words[1:])


def check_bench(words: list[str]) -> list[str]:
    from agglab.bench import SECTIONS

    problems = check_argv(_bench_parser(), words)
    for i, w in enumerate(words):
        if w == "--only" and i + 1 < len(words):
            problems += [f"python -m agglab.bench: no section {s!r}" for s in words[i + 1].split(",")
                         if s not in SECTIONS]
    return problems


# -- make --------------------------------------------------------------------------------
def makefile() -> tuple[set[str], set[str]]:
    """(targets, variables) of the Makefile."""
    text = (REPO / "Makefile").read_text()
    targets = set(re.findall(r"^([\w./-]+)\s*:(?!=)", text, re.M))
    variables = set(re.findall(r"^(\w+)\s*(?:\?|:|\+)?=", text, re.M))
    return targets, variables


def check_make(words: list[str]) -> list[str]:
    targets, variables = makefile()
    problems, bench = [], []
    for w in words[1:]:
        if "=" in w:
            name, value = w.split("=", 1)
            if name not in variables:
                problems.append(f"make: no variable {name} in the Makefile")
            elif name == "ONLY":
                bench += ["--only", value]
            elif name == "COMPARE":
                bench += ["--compare", value]
            elif name == "BENCH_ARGS":
                bench += shlex.split(value)
        elif w.startswith("-"):
            problems.append(f"make: option {w} (docs give make targets and VAR=value only)")
        elif w not in targets:
            problems.append(f"make: no target {w!r}")
    return problems + (check_bench(bench) if bench else [])


# -- the lab -----------------------------------------------------------------------------
def check_lab(line: str) -> list[str]:
    from agglab.lab import LabCLI

    problems = []
    for part in line[len("agglab>"):].split(" | "):
        word = _shell_words(part).split()[:1]
        if word and not (hasattr(LabCLI, f"do_{word[0]}") or re.fullmatch(r"[a-z]+\d+(s\d+)?", word[0])):
            problems.append(f"lab: no command {word[0]!r}")
    return problems


def check(command: str) -> list[str]:
    if command.startswith("agglab>"):
        return check_lab(command)
    words = _tokens(command)
    if words[0] == "agglab":
        return check_agglab(words)
    if words[0] == "make":
        return check_make(words)
    return check_bench(words[3:])          # python -m agglab.bench ...


def all_commands() -> list[tuple[str, int, str]]:
    return [(str(doc.relative_to(REPO)), n, c) for doc in DOCS for n, c in commands_in(doc.read_text())]


COMMANDS = all_commands()


def test_the_docs_show_commands():
    """The collector finds the README's quick start (else every check below is vacuous)."""
    readme = [c for doc, _, c in COMMANDS if doc == "README.md"]
    assert any(c.startswith("agglab allreduce --workers") for c in readme), readme
    assert any(c.startswith("make bench ONLY=") for c in readme), readme
    assert any(c.startswith("agglab> fail") for c in readme), readme
    assert len(COMMANDS) > 100


def test_every_documented_command_parses():
    bad = [f"{doc}:{n}: {c}\n    {'; '.join(problems)}" for doc, n, c in COMMANDS if (problems := check(c))]
    assert not bad, "commands in the docs that agglab or make would reject:\n" + "\n".join(bad)


@pytest.mark.parametrize("doc_line, problem", [
    ("sudo .venv/bin/agglab allreduce --wrokers 2", "unknown option --wrokers"),
    ("agglab allredcue --workers 2", "unknown command 'allredcue'"),
    ("agglab experiment quick --dryrun", "unknown option --dryrun"),
    ("make bench --only daemon", "option --only"),
    ("make bench ONLY=deamon", "no section 'deamon'"),
    ("make bnech", "no target 'bnech'"),
    ("make test KK=256", "no variable KK"),
    ("agglab> fial a1 c1", "no command 'fial'"),
    ("make bench BENCH_ARGS='--rate 5'", "unknown option --rate"),
])
def test_a_wrong_command_is_caught(doc_line, problem):
    found = commands_in(f"```sh\n{doc_line}\n```\n")
    assert len(found) == 1
    assert any(problem in p for p in check(found[0][1])), check(found[0][1])


def test_right_commands_pass_the_checker():
    for line in ("sudo env AGGLAB_K=256 .venv/bin/agglab allreduce --workers 8 --elements 1000000 --bw 40",
                 "agglab exercise check 1 --dir ~/ex1 --json", "make experiment CONFIG=quick K=256",
                 "make bench ONLY=wire,trees COMPARE=results/bench/X.json", "agglab> slots e1 | stats | help"):
        assert check(commands_in(f"```\n{line}\n```")[0][1]) == [], line


def _runnable(command: str) -> bool:
    words = _tokens(command)
    return (words[:3] == ["agglab", "exercise", "list"] or words == ["agglab", "--help"]
            or (words[:2] == ["agglab", "experiment"] and "--dry-run" in words))


@pytest.mark.parametrize("doc, n, command", [c for c in COMMANDS if c[2].startswith("make ")],
                         ids=lambda v: v if isinstance(v, str) else None)
def test_make_lines_dry_run(doc, n, command):
    """`make -n` as written: make itself rejects an unknown target."""
    words = _tokens(command)
    proc = subprocess.run(["make", "-n", *words[1:]], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, f"{doc}:{n}: {command}\n{proc.stderr}"


@pytest.mark.parametrize("doc, n, command", [c for c in COMMANDS if _runnable(c[2])],
                         ids=lambda v: v if isinstance(v, str) else None)
def test_cheap_documented_commands_run(doc, n, command, tmp_path):
    words = _tokens(command)
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.run([sys.executable, "-m", "agglab.cli", *words[1:]], cwd=REPO, capture_output=True,
                          text=True, timeout=120, env=env)
    assert proc.returncode == 0, f"{doc}:{n}: {command}\n{proc.stderr[-2000:]}"


def _subcommands() -> list[tuple[str, ...]]:
    """Each distinct agglab command path the docs use (`allreduce`, `exercise check`, ...)."""
    found = set()
    for _doc, _n, command in COMMANDS:
        words = _tokens(command)
        if words[0] != "agglab" or len(words) < 2 or words[1].startswith("-"):
            continue
        sub = _subparsers(_agglab_parser()).choices.get(words[1])
        path = (words[1],)
        inner = _subparsers(sub) if sub is not None else None
        if inner is not None and len(words) > 2 and words[2] in inner.choices:
            path += (words[2],)
        found.add(path)
    return sorted(found)


@pytest.mark.parametrize("path", _subcommands(), ids=" ".join)
def test_every_documented_subcommand_answers_help(path):
    """Each command the docs use imports and answers --help (no root, nothing started)."""
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.run([sys.executable, "-m", "agglab.cli", *path, "--help"], cwd=REPO, capture_output=True,
                          text=True, timeout=120, env=env)
    assert proc.returncode == 0 and "usage" in proc.stdout.lower(), proc.stderr[-2000:]


def _options_without_help(parser: argparse.ArgumentParser, path: str):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _options_without_help(sub, f"{path} {name}")
        elif action.option_strings and not isinstance(action, argparse._HelpAction) and not action.help:
            yield f"{path} {action.option_strings[0]}"


def test_every_option_has_help_text():
    missing = [*_options_without_help(_agglab_parser(), "agglab"),
               *_options_without_help(_experiment_parser(), "agglab experiment"),
               *_options_without_help(_bench_parser(), "python -m agglab.bench")]
    assert not missing, f"options without help text: {missing}"


def test_relative_links_in_the_docs_resolve():
    """A guide moved or renamed leaves no dangling link in the README or another guide."""
    broken = []
    for doc in DOCS:
        for target in re.findall(r"\]\(([^)\s]+)\)", doc.read_text()):
            path = target.split("#", 1)[0]
            if path and not re.match(r"[a-z]+:", path) and not (doc.parent / path).exists():
                broken.append(f"{doc.relative_to(REPO)}: {target}")
    assert not broken, broken


def _printing_examples():
    """(doc, what it says the block prints, the python block) for each ```python block whose
    introduction says "prints `...`"."""
    found = []
    for doc in DOCS:
        for m in re.finditer(r"prints `([^`]+)`[^\n]*\n+```python\n(.*?)```", doc.read_text(), re.S):
            found.append(pytest.param(m.group(1), m.group(2), id=f"{doc.relative_to(REPO)}"))
    return found


@pytest.mark.parametrize("printed,code", _printing_examples())
def test_a_python_example_prints_what_its_doc_says(printed, code):
    env = {k: v for k, v in os.environ.items() if k != "AGGLAB_K"}     # the docs' figures: K=64
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120,
                         env=env)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == printed
