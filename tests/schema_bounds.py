"""The OpenAPI document as the schemathesis runs read it (``tests/api/test_schemathesis.py``,
``bench/fuzz.py``): every long poll's ``wait_ms`` narrowed, so no generated request waits the
contract's 30 s. Pure: no Django, no database."""

from __future__ import annotations

from typing import Any

WAIT_MS_MAX = 200
"""The longest ``wait_ms`` a generated request asks for (ms)."""


def wait_ms_bounded(document: dict[str, Any], maximum: int = WAIT_MS_MAX) -> dict[str, Any]:
    """``document`` (changed in place and returned) with every ``wait_ms`` (a body property or a
    query parameter's schema) at most ``maximum`` ms."""

    def narrow(node: Any) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if (
                    key == "wait_ms"
                    and isinstance(value, dict)
                    and "maximum" in value
                    or key == "schema"
                    and node.get("name") == "wait_ms"
                ):
                    value["maximum"] = maximum
                narrow(value)
        elif isinstance(node, list):
            for item in node:
                narrow(item)

    narrow(document)
    return document
