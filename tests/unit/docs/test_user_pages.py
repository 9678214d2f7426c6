"""The user pages (README.md and docs/ outside contributing/) speak to users: they name no test
file and quote no timing of the project's own build machine, and every relative link in any
page resolves to a file that exists.

Generated blocks (a marker comment, then a fenced block a command writes) are left out of the
wording checks: they quote a command as it ran, recorded inputs included."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
DOCS = ROOT / "docs"
CONTRIBUTING = DOCS / "contributing"
# A link to a page other work is adding; it leaves this set once its file is in the tree.
LINK = re.compile(r"\]\((?P<target>[^)\s]+)\)")
GENERATED_BLOCK = re.compile(
    r"<!-- [a-z-]+: make docs-examples writes this block[^>]*-->\n```.*?\n```", re.DOTALL
)
# Build and test timings of the project's machine belong in contributing/benchmarks.md.
MACHINE_TIMING = [
    re.compile(r"load average", re.IGNORECASE),
    re.compile(r"\bpolyglot\b", re.IGNORECASE),
    re.compile(r"\bthis (?:shared |project's )?(?:two-core |2-core )?machine\b", re.IGNORECASE),
    re.compile(r"\bdevelopment machine\b", re.IGNORECASE),
    re.compile(r"\b\d[\d,]* (?:tests )?passed\b"),
    re.compile(r"\b\d+ min \d+ s\b"),
]


def all_pages() -> list[Path]:
    return [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]


def user_pages() -> list[Path]:
    return [page for page in all_pages() if CONTRIBUTING not in page.parents]


def prose(text: str) -> str:
    """The page without its generated blocks."""
    return GENERATED_BLOCK.sub("", text)


def files_named_in_tests(text: str) -> list[str]:
    return [line for line in prose(text).splitlines() if "tests/" in line]


def machine_timings(text: str) -> list[str]:
    return [
        line
        for line in prose(text).splitlines()
        if any(pattern.search(line) for pattern in MACHINE_TIMING)
    ]


def broken_links(page: Path, text: str) -> list[str]:
    """Relative link targets of ``page`` that name no existing file (anchors not checked)."""
    broken = []
    for match in LINK.finditer(text):
        target = match["target"]
        if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
            continue
        resolved = (page.parent / target.split("#", 1)[0]).resolve()
        if not resolved.exists():
            broken.append(target)
    return broken


def page_id(page: Path) -> str:
    return str(page.relative_to(ROOT))


@pytest.mark.parametrize("page", user_pages(), ids=page_id)
def test_a_user_page_names_no_test_file(page: Path) -> None:
    named = files_named_in_tests(page.read_text(encoding="utf-8"))
    assert not named, f"{page_id(page)} names test files (move it to docs/contributing/): {named}"


@pytest.mark.parametrize("page", user_pages(), ids=page_id)
def test_a_user_page_quotes_no_timing_of_the_build_machine(page: Path) -> None:
    found = machine_timings(page.read_text(encoding="utf-8"))
    assert not found, f"{page_id(page)}: put these in docs/contributing/benchmarks.md: {found}"


@pytest.mark.parametrize("page", all_pages(), ids=page_id)
def test_every_relative_link_resolves(page: Path) -> None:
    broken = broken_links(page, page.read_text(encoding="utf-8"))
    assert not broken, f"{page_id(page)} links to files that do not exist: {broken}"


def test_the_checks_catch_what_they_look_for(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    text = (
        "See [here](missing.md#x), [web](https://example.com), [self](#top), [me](page.md).\n"
        "Run tests/unit/test_x.py; it took 22 min 8 s at load average 4.\n"
        "<!-- stepscope-diff: make docs-examples writes this block; a test checks it -->\n"
        "```\n$ stepscope diff tests/data/a tests/data/b\n```\n"
    )
    page.write_text(text)
    assert broken_links(page, text) == ["missing.md#x"]
    assert files_named_in_tests(text) == [
        "Run tests/unit/test_x.py; it took 22 min 8 s at load average 4."
    ]
    assert len(machine_timings(text)) == 1
