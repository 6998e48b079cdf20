"""The docs are reference pages that say what is true now: the pages that hold figures stay
short (each figure's current table; past runs go to ``bench/RESULTS.md``), no page names an
issue or the sitting that wrote it, and the README's build names are the code's."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from fetchlat.proxy.build import HOT_PATHS

ROOT = Path(__file__).parents[1]
PAGES = sorted([ROOT / "README.md", *(ROOT / "docs").glob("*.md")])
SHORT = {"docs/performance.md": 300, "docs/reliability.md": 300}
# an issue named ("issue 44", "#28") or the sitting or session that wrote a line
NAMES_ITS_MAKING = re.compile(r"\bissues? ?#?\d+\b|(?<![\w/&])#\d+\b|\b(?:this|that) (?:session|sitting)\b"
                              r"|\bstop \d+\b|\b(?:this|that|the last|last) stop\b", re.IGNORECASE)


@pytest.mark.parametrize("page", sorted(SHORT))
def test_the_pages_of_figures_stay_short(page: str) -> None:
    n = len((ROOT / page).read_text().splitlines())
    assert n <= SHORT[page], f"{page}: {n} lines; its past runs belong in bench/RESULTS.md"


def test_no_page_names_an_issue_or_the_sitting_that_wrote_it() -> None:
    found = [f"{p.relative_to(ROOT)}:{i}: {line.strip()}" for p in PAGES
             for i, line in enumerate(p.read_text().splitlines(), 1) if NAMES_ITS_MAKING.search(line)]
    assert found == []


def test_the_pattern_catches_what_it_is_for() -> None:
    for line in ("as issue 44 asked", "the code #28 closed with", "written in this session", "stop 70",
                 "inside the last stop's make test"):
        assert NAMES_ITS_MAKING.search(line), line
    for line in ("a share session's first fetch", "sent session 0, epoch -1", "`&#8203;`", "a sitting's speed"):
        assert not NAMES_ITS_MAKING.search(line), line


def test_the_readme_names_the_builds_the_code_reports() -> None:
    readme = (ROOT / "README.md").read_text()
    named = re.search(r'hot_path=((?:"\w+"\|?)+)', readme)
    assert named is not None, "the README names fetchlat_build_info's hot_path values"
    assert tuple(re.findall(r'"(\w+)"', named.group(1))) == HOT_PATHS
    operations = (ROOT / "docs" / "operations.md").read_text()
    assert all(f"`{v}`" in operations for v in HOT_PATHS)
