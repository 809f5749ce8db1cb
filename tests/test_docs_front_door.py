"""The README stays a front door and the project's text speaks of reasons, not tickets.

A README that grows past 12,000 bytes has become a manual again (the guides are in
docs/guide/); "issue N" in code or docs means nothing to a reader of this checkout."""

import re

from tests.conftest import REPO

SKIP_DIRS = {".git", ".venv", "build", "results", "node_modules", "__pycache__", ".pytest_cache"}
TICKET = re.compile(r"issue [0-9]")


def _texts():
    for path in REPO.rglob("*"):
        if path.suffix in (".py", ".md") and path.is_file() and not SKIP_DIRS & set(path.relative_to(REPO).parts):
            yield path


def test_the_readme_is_at_most_12000_bytes():
    size = (REPO / "README.md").stat().st_size
    assert 0 < size <= 12_000, f"README.md is {size} bytes; move detail to docs/guide/"


def test_the_design_is_a_page_per_contract_each_under_20000_bytes():
    """docs/design/ is read a contract at a time; one page that grows past 20 KB holds two."""
    pages = sorted((REPO / "docs" / "design").glob("*.md"))
    index = (REPO / "docs" / "design" / "README.md").read_text()
    assert len(pages) > 10 and not (REPO / "docs" / "design.md").exists()
    assert [p.name for p in pages if p.stat().st_size > 20_000] == []
    assert [p.name for p in pages if p.name != "README.md" and f"]({p.name})" not in index] == []


def test_links_to_the_design_pages_lead_somewhere():
    """A file that sends its reader to a page of docs/design/ names a page that exists."""
    named = {(p.relative_to(REPO), m) for p in _texts()
             for m in re.findall(r"docs/design/([\w-]+\.md)", p.read_text(errors="replace"))}
    assert named and [f"{p}: {m}" for p, m in sorted(named) if not (REPO / "docs" / "design" / m).exists()] == []


def test_no_code_or_doc_names_an_issue_number():
    found = [f"{p.relative_to(REPO)}:{n}" for p in _texts()
             for n, line in enumerate(p.read_text(errors="replace").splitlines(), 1) if TICKET.search(line)]
    assert found == [], found
