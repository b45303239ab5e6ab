"""The docs stand alone: every relative link in README.md, docs/ and localcluster/README.md
points at a file (and heading) of the repository, and nothing points outside it (a user
has no ../shared/DESIGN.md)."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
PAGES = [ROOT / "README.md", ROOT / "localcluster" / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def _anchors(page: Path) -> set[str]:
    """GitHub's heading slugs: lower case, punctuation dropped, spaces to dashes."""
    out = set()
    for line in page.read_text().splitlines():
        m = re.match(r"#+\s+(.*)", line)
        if m:
            out.add(re.sub(r"[^\w\- ]", "", m.group(1).strip().lower()).replace(" ", "-"))
    return out


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve_inside_the_repository(page):
    bad = []
    text = re.sub(r"`[^`\n]*`", "", page.read_text())  # code spans are not links
    for target in LINK.findall(text):
        if re.match(r"[a-z]+:", target):
            continue  # an absolute URL
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if ROOT not in dest.parents and dest != ROOT or not dest.exists():
            bad.append(target)
        elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
            bad.append(target)
    assert not bad, f"{page.name}: links that do not resolve: {bad}"


def test_no_page_or_docstring_points_at_the_design_file_users_lack():
    files = [*PAGES, *ROOT.glob("operator/**/*.py"), *ROOT.glob("probe_image/**/*.py"),
             *ROOT.glob("localcluster/**/*.py")]
    hits = [str(f.relative_to(ROOT)) for f in files
            if re.search(r"DESIGN\.md|\.\./shared/", f.read_text())]
    assert not hits, hits
