"""Every module of the code stays at most ``MAX_LINES`` lines (the coding guide's rule; migrations
are generated and left out): a module growing past it is split along a seam, not let grow."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
ROOTS = ("broker", "console", "tasks", "halfmoon", "client")
MAX_LINES = 400


def tracked_modules() -> list[Path]:
    """The tracked ``.py`` files under ``ROOTS`` (git's index; every ``.py`` file there when the
    tree is no git checkout), relative to ``ROOT``, migrations left out."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--", *(f"{root}/*.py" for root in ROOTS)],
        cwd=ROOT,
        capture_output=True,
        check=False,
        text=True,
    )
    if listed.returncode == 0:
        paths = [Path(p) for p in listed.stdout.split("\0") if p]
    else:
        paths = [p.relative_to(ROOT) for root in ROOTS for p in (ROOT / root).rglob("*.py")]
    return [p for p in paths if "migrations" not in p.parts and (ROOT / p).is_file()]


def line_count(path: Path) -> int:
    with (ROOT / path).open("rb") as f:
        return sum(1 for _ in f)


def test_the_modules_are_found():
    modules = {str(p) for p in tracked_modules()}
    assert "halfmoon/settings.py" in modules
    assert "client/halfmoon_client/producer.py" in modules
    assert not any("/migrations/" in m for m in modules)


def test_every_module_is_at_most_400_lines():
    offenders = {str(p): n for p in tracked_modules() if (n := line_count(p)) > MAX_LINES}
    assert not offenders, f"modules over {MAX_LINES} lines (split them along a seam): " + ", ".join(
        f"{path} ({n})" for path, n in sorted(offenders.items(), key=lambda kv: -kv[1])
    )
