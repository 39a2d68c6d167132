"""docs/api.md documents exactly the API's routes: every route of the URLconf under ``/api/``
(``/api/v1/...``, ``/api/schema/``, ``/api/docs/``) and every route served by ``broker.api``
(``/healthz``, ``/metrics``) has a section headed ``### METHOD /path``, and every such heading
names a route that exists.

The routes come from walking the URL resolver, never from a list kept here. A path is written
as the URLconf has it, each parameter normalised to ``{name}`` (``<msgid:transaction_id>`` and
``(?P<transaction_id>...)`` both become ``{transaction_id}``). The methods come from the view
class (DRF's ``cls``, Django's ``view_class``): the handlers among its ``http_method_names``,
without the ``HEAD`` and ``OPTIONS`` every view answers; a function view has no method list, so
only its path is held to the page.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from django.urls import URLPattern, URLResolver, get_resolver

API_DOC = Path(__file__).resolve().parents[2] / "docs" / "api.md"

HTTP_METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS")
# The methods every class-based view answers without a handler of its own.
GENERIC_METHODS = frozenset({"HEAD", "OPTIONS"})

# A section heading naming a route: "### METHOD rest" with METHOD an HTTP method.
_SECTION = re.compile(rf"^### ({'|'.join(HTTP_METHODS)}) (.*?)\s*$", re.MULTILINE)
_DOC_PATH = re.compile(r"^/[A-Za-z0-9_./{}-]*$")
_CONVERTER = re.compile(r"<(?:\w+:)?(\w+)>")
_NAMED_GROUP = "(?P<"


@dataclass(frozen=True)
class Route:
    """One route of the URLconf: its path (``/api/v1/transactions/{transaction_id}/end``) and
    its methods (None for a function view, whose methods cannot be read)."""

    path: str
    methods: frozenset[str] | None


def _regex_route(pattern: str) -> str:
    """A regex route as a path: anchors and escapes dropped, each named group ``{name}``
    (nested parentheses inside a group included)."""
    out: list[str] = []
    i = 0
    while i < len(pattern):
        if pattern.startswith(_NAMED_GROUP, i):
            end = pattern.index(">", i)
            name = pattern[i + len(_NAMED_GROUP) : end]
            depth, j = 1, end + 1
            while depth:
                if pattern[j] == "\\":
                    j += 1
                elif pattern[j] == "(":
                    depth += 1
                elif pattern[j] == ")":
                    depth -= 1
                j += 1
            out.append(f"{{{name}}}")
            i = j
        elif pattern[i] == "\\" and i + 1 < len(pattern):
            out.append(pattern[i + 1])
            i += 2
        else:
            out.append(pattern[i])
            i += 1
    text = "".join(out)
    return text.removeprefix("^").removesuffix("\\Z").removesuffix("$")


def normalised(route: str) -> str:
    """A URLconf route (a ``path()`` route or a regex) with each parameter as ``{name}``."""
    if _NAMED_GROUP in route or route.startswith("^"):
        return _regex_route(route)
    return _CONVERTER.sub(lambda m: f"{{{m.group(1)}}}", route)


def _view_methods(callback: object) -> frozenset[str] | None:
    view_class = getattr(callback, "cls", None) or getattr(callback, "view_class", None)
    if view_class is None:
        return None
    return frozenset(
        name.upper()
        for name in view_class.http_method_names
        if hasattr(view_class, name) and name.upper() not in GENERIC_METHODS
    )


def _walk(patterns: list, prefix: str = "") -> Iterator[tuple[str, object]]:
    for pattern in patterns:
        route = prefix + normalised(str(pattern.pattern))
        if isinstance(pattern, URLResolver):
            yield from _walk(pattern.url_patterns, route)
        elif isinstance(pattern, URLPattern):
            yield route, pattern.callback


def api_routes() -> list[Route]:
    """The API's routes of the root URLconf: every path under ``/api/`` and every path whose
    view is served by the ``broker.api`` package."""
    routes = []
    for route, callback in _walk(get_resolver().url_patterns):
        module = getattr(callback, "__module__", "") or ""
        if route.startswith("api/") or module.split(".")[:2] == ["broker", "api"]:
            routes.append(Route(path=f"/{route}", methods=_view_methods(callback)))
    return routes


def documented_sections(text: str) -> list[tuple[str, str]]:
    """Each ``### METHOD /path`` heading of ``text``, as (METHOD, rest of the heading)."""
    return [(m.group(1), m.group(2)) for m in _SECTION.finditer(text)]


def mismatches(routes: list[Route], sections: list[tuple[str, str]]) -> list[str]:
    """What keeps ``sections`` from documenting exactly ``routes``, one line each: a method of
    a route with no section, a route of unknown methods with no section at all, a section whose
    heading is not ``METHOD /path``, a section naming no route (or a method the route does not
    have), and a heading written twice. Empty when they agree."""
    problems = []
    by_path = {route.path: route for route in routes}
    headings = [f"{method} {rest}" for method, rest in sections]
    documented_paths = {rest for _, rest in sections}
    for route in routes:
        if route.methods is None:
            if route.path not in documented_paths:
                problems.append(f"undocumented: {route.path} (any method)")
            continue
        for method in sorted(route.methods):
            if f"{method} {route.path}" not in headings:
                problems.append(f"undocumented: ### {method} {route.path}")
    for method, rest in sections:
        route = by_path.get(rest)
        if not _DOC_PATH.match(rest):
            problems.append(f"not a path: ### {method} {rest}")
        elif route is None:
            problems.append(f"no such route: ### {method} {rest}")
        elif route.methods is not None and method not in route.methods:
            problems.append(
                f"no such method: ### {method} {rest} (the view has {sorted(route.methods)})"
            )
    for heading in sorted({h for h in headings if headings.count(h) > 1}):
        problems.append(f"written twice: ### {heading}")
    return problems


def test_api_md_documents_every_route_and_only_routes():
    routes = api_routes()
    sections = documented_sections(API_DOC.read_text(encoding="utf-8"))

    problems = mismatches(routes, sections)

    assert problems == [], "docs/api.md and the URLconf disagree:\n" + "\n".join(problems)


def test_the_routes_walked_include_the_nested_and_the_top_level_ones():
    paths = {route.path: route.methods for route in api_routes()}

    assert paths["/api/v1/transactions/{transaction_id}/end"] == {"POST"}
    assert paths["/api/v1/alert-rules/{name}"] == {"GET", "PATCH", "DELETE"}
    assert paths["/api/schema/"] == {"GET"}
    assert paths["/healthz"] is None
    assert not any(path.startswith(("/console/", "/admin/")) for path in paths)


def test_a_missing_section_and_a_section_of_no_route_are_both_reported():
    routes = api_routes()
    # The sections of a page that documents every route exactly (a function view under GET).
    sections = [(m, route.path) for route in routes for m in sorted(route.methods or {"GET"})]
    assert mismatches(routes, sections) == []
    without_end = [
        s for s in sections if s != ("POST", "/api/v1/transactions/{transaction_id}/end")
    ]
    without_healthz = [s for s in sections if s[1] != "/healthz"]
    extra = [
        *sections,
        ("GET", "/api/v1/transactions/{msg_id}/end"),
        ("DELETE", "/api/v1/topics"),
        ("GET", "api/v1/topics"),
        ("GET", "/api/v1/topics"),
    ]

    assert mismatches(routes, without_end) == [
        "undocumented: ### POST /api/v1/transactions/{transaction_id}/end"
    ]
    assert mismatches(routes, without_healthz) == ["undocumented: /healthz (any method)"]
    assert mismatches(routes, extra) == [
        "no such route: ### GET /api/v1/transactions/{msg_id}/end",
        "no such method: ### DELETE /api/v1/topics (the view has ['GET', 'POST'])",
        "not a path: ### GET api/v1/topics",
        "written twice: ### GET /api/v1/topics",
    ]


def test_converters_and_regex_groups_become_braced_names():
    assert normalised("transactions/<msgid:transaction_id>/end") == (
        "transactions/{transaction_id}/end"
    )
    assert normalised("runs/<run_id>") == "runs/{run_id}"
    assert normalised(r"^runs/(?P<run_id>[0-9]+(?:\.[0-9]+)?)/report\.json$") == (
        "runs/{run_id}/report.json"
    )
