"""No import cycle inside ``broker``, ``console``, ``halfmoon`` or ``tasks``: every module's
imports, at the top, inside functions and under ``TYPE_CHECKING``, form a graph with no
cycle inside each package (grimp, import-linter's graph). The layers between the packages are
import-linter's contracts (``[tool.importlinter]`` in pyproject.toml, run by ``.ci/run``)."""

from __future__ import annotations

import sys
from pathlib import Path

import grimp
import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("broker", "console", "halfmoon", "tasks")

pytestmark = pytest.mark.unit


def import_cycles(graph: grimp.ImportGraph, package: str) -> list[list[str]]:
    """The strongly connected components of more than one module (or a module importing
    itself) among ``package``'s modules, each sorted: every one holds a cycle."""
    inside = sorted(m for m in graph.modules if m == package or m.startswith(package + "."))
    members = set(inside)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def imported(module: str) -> list[str]:
        return sorted(members & graph.find_modules_directly_imported_by(module))

    for start in inside:
        if start in index:
            continue
        # Tarjan's algorithm, iteratively (packages are deeper than Python's recursion limit
        # allows only in theory, but a loop is as short).
        work = [(start, iter(imported(start)))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(imported(child))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1 or node in graph.find_modules_directly_imported_by(node):
                    cycles.append(sorted(component))
    return cycles


@pytest.fixture(scope="module")
def graph() -> grimp.ImportGraph:
    sys.path[:0] = [str(ROOT)]
    try:
        return grimp.build_graph(*PACKAGES, cache_dir=None)
    finally:
        del sys.path[0]


@pytest.mark.parametrize("package", PACKAGES)
def test_no_import_cycle_inside_the_package(graph, package):
    assert import_cycles(graph, package) == []


def test_a_cycle_is_found():
    """The finder itself: two modules importing each other, and a module importing itself."""
    graph = grimp.ImportGraph()
    for module in ("broker", "broker.rules", "broker.rules.states", "broker.rules.checks"):
        graph.add_module(module)
    graph.add_module("console")
    graph.add_module("console.roles")
    graph.add_import(importer="broker.rules.checks", imported="broker.rules.states")
    assert import_cycles(graph, "broker") == []
    graph.add_import(importer="broker.rules.states", imported="broker.rules.checks")
    graph.add_import(importer="broker.rules.checks", imported="broker.rules.states")
    graph.add_import(importer="console.roles", imported="console.roles")
    assert ["broker.rules.checks", "broker.rules.states"] in import_cycles(graph, "broker")
    assert import_cycles(graph, "console") == [["console.roles"]]
