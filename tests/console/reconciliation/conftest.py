"""Users of each console role: the fixture of ``tests/console/overview``."""

from __future__ import annotations

from tests.console.overview.conftest import console_client

__all__ = ["console_client"]
