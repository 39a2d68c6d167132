"""Module docstrings are contracts, not essays: at most 15 lines in the code's packages.

Reasoning belongs in docs/ (docs/design.md or the topic's document), figures measured on a
machine in bench/README.md."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("broker", "console", "tasks", "halfmoon", "client/halfmoon_client")
MAX_LINES = 15


def module_docstrings() -> dict[str, str]:
    """Every module's docstring (cleaned, "" without one), by path, migrations left out."""
    found = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).parts
            if "migrations" in parts or "__pycache__" in parts:
                continue
            tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
            found[str(path.relative_to(ROOT))] = ast.get_docstring(tree, clean=True) or ""
    return found


def test_module_docstrings_are_at_most_15_lines():
    long = {
        path: len(doc.splitlines())
        for path, doc in module_docstrings().items()
        if len(doc.splitlines()) > MAX_LINES
    }
    assert not long, (
        f"module docstrings over {MAX_LINES} lines (move the reasoning to docs/): {long}"
    )


def test_the_packages_are_found():
    paths = module_docstrings()
    assert "broker/conf.py" in paths and "client/halfmoon_client/__init__.py" in paths
    assert not any("/migrations/" in p for p in paths)
