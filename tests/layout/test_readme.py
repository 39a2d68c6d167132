"""The README is a screen or two, and the documents form one index whose links all resolve."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS_INDEX = ROOT / "docs" / "README.md"
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")


def local_links(path: Path) -> list[str]:
    """The targets of the Markdown links and images of ``path`` that name a file of the
    repository (no URL scheme, no bare anchor), anchors removed."""
    targets = []
    for target in LINK.findall(path.read_text(encoding="utf-8")):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
            continue
        targets.append(target.split("#", 1)[0])
    return targets


def test_readme_is_at_most_200_lines():
    assert len(README.read_text(encoding="utf-8").splitlines()) <= 200


@pytest.mark.parametrize("document", [README, DOCS_INDEX, ROOT / "CONTRIBUTING.md"], ids=str)
def test_every_link_resolves_to_a_file(document: Path):
    links = local_links(document)
    assert links, f"{document} links nothing"
    missing = [t for t in links if not (document.parent / t).exists()]
    assert not missing, f"{document.name} links files that do not exist: {missing}"


def test_every_document_in_docs_is_in_the_index():
    linked = {(DOCS_INDEX.parent / t).resolve() for t in local_links(DOCS_INDEX)}
    documents = {p.resolve() for p in (ROOT / "docs").glob("*.md") if p != DOCS_INDEX}
    assert not documents - linked, f"docs/README.md does not link: {sorted(documents - linked)}"


def test_the_readme_points_at_the_index():
    assert "docs/README.md" in local_links(README)
