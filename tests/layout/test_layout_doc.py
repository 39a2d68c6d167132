"""docs/layout.md is the tree's: every package and module with its docstring's summary.

Stale after a module is added, removed or its docstring's summary changes: run ``bin/docs``."""

from __future__ import annotations

from pathlib import Path

import pytest

from halfmoon.layout_doc import ROOT, ROOTS, modules, render

pytestmark = pytest.mark.unit
LAYOUT = ROOT / "docs" / "layout.md"


def test_layout_doc_is_rendered_from_the_tree():
    assert LAYOUT.read_text(encoding="utf-8") == render(), "docs/layout.md is stale: run bin/docs"


def test_every_module_of_the_code_is_listed():
    text = LAYOUT.read_text(encoding="utf-8")
    for root, _ in ROOTS:
        for path in modules(root):
            rel = path.relative_to(ROOT)
            name = f"{rel.parent}/" if path.name == "__init__.py" else str(rel)
            assert f"| `{name}` |" in text, name


def test_a_new_module_makes_the_doc_stale(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    import halfmoon.layout_doc as layout_doc

    package = tmp_path / "broker"
    package.mkdir()
    (package / "__init__.py").write_text('"""A broker."""\n')
    monkeypatch.setattr(layout_doc, "ROOT", tmp_path)
    monkeypatch.setattr(layout_doc, "ROOTS", (("broker", "The broker."),))
    before = layout_doc.render()
    (package / "added.py").write_text('"""An added module.\n\nMore."""\n')
    after = layout_doc.render()
    assert "| `broker/added.py` | An added module. |" in after
    assert before != after
    (package / "added.py").write_text('"""Another summary."""\n')
    assert "| `broker/added.py` | Another summary. |" in layout_doc.render()
